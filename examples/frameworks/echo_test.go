package frameworks_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/examples/frameworks"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/labstack/echo/v5"
)

func newIdem(t *testing.T) *middleware.Handler {
	t.Helper()
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	idem, err := middleware.New(store)
	if err != nil {
		t.Fatal(err)
	}
	return idem
}

func post(h http.Handler, path, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// Why EchoMiddleware exists: echo.WrapMiddleware(idem.Wrap) looks like it
// fits, but the chain's error reaches echo's error handler after the core has
// finished, and the core has stored an empty 200 for the request; the retry
// gets that 200. If echo changes this, EchoMiddleware's doc is to be changed.
func TestEchoWrapMiddlewareStoresAnErrorAs200(t *testing.T) {
	e := echo.New()
	e.Use(echo.WrapMiddleware(newIdem(t).Wrap))
	e.POST("/charges", func(c *echo.Context) error {
		return echo.NewHTTPError(http.StatusBadRequest, "amount must be positive")
	})
	post(e, "/charges", "k", `{}`)
	if w := post(e, "/charges", "k", `{}`); w.Code != http.StatusOK || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("echo.WrapMiddleware's retry: %d %q %s; the pitfall EchoMiddleware's doc describes is gone", w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
	}
}

// A 5xx answered from a returned error releases the key: the retry runs the
// handler again, and its answer is stored.
func TestEchoMiddlewareErrorOf5xxReleasesTheKey(t *testing.T) {
	calls := 0
	e := echo.New()
	e.Use(frameworks.EchoMiddleware(newIdem(t)))
	e.POST("/charges", func(c *echo.Context) error {
		calls++
		if calls == 1 {
			return errors.New("database unavailable")
		}
		return c.String(http.StatusCreated, "charged")
	})
	if w := post(e, "/charges", "k", `{}`); w.Code != http.StatusInternalServerError {
		t.Fatalf("first: %d %s, want echo's 500", w.Code, w.Body)
	}
	if w := post(e, "/charges", "k", `{}`); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry: %d %q %s, want the handler run again (201, not replayed)", w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
	}
	if w := post(e, "/charges", "k", `{}`); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("second retry: %d %q, want the 201 replayed", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
	if calls != 2 {
		t.Fatalf("handler ran %d times, want 2", calls)
	}
}

// Requests the core does not track (GET) and errors for them (echo's 404)
// pass through as echo answers them; the context's response and request are
// echo's own again once the middleware returns.
func TestEchoMiddlewareUntrackedAndRestored(t *testing.T) {
	var inner, outer http.ResponseWriter
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			outer = c.Response()
			err := next(c)
			if c.Response() != outer {
				t.Errorf("after the middleware, c.Response() is %T, not echo's own", c.Response())
			}
			return err
		}
	})
	e.Use(frameworks.EchoMiddleware(newIdem(t)))
	e.GET("/charges", func(c *echo.Context) error {
		inner = c.Response()
		return c.String(http.StatusOK, "list")
	})
	w := httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest("GET", "/charges", nil))
	if w.Code != http.StatusOK || w.Body.String() != "list" || inner == nil {
		t.Fatalf("GET: %d %s", w.Code, w.Body)
	}
	if w := post(e, "/nowhere", "k", `{}`); w.Code != http.StatusNotFound {
		t.Fatalf("POST to no route: %d %s, want echo's 404", w.Code, w.Body)
	}
}
