package frameworks_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/idemproxy/idemproxy/examples/frameworks"
)

func newGin(t *testing.T) *gin.Engine {
	t.Helper()
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.Recovery(), frameworks.GinMiddleware(newIdem(t)))
	return r
}

// gin sends the status with the body: a header set after c.Status is sent
// and stored, so the replay has it too.
func TestGinHeaderSetAfterStatusIsStored(t *testing.T) {
	r := newGin(t)
	r.POST("/charges", func(c *gin.Context) {
		c.Status(http.StatusCreated)
		c.Header("Location", "/charges/1")
		_, _ = c.Writer.WriteString("charged")
	})
	for i, replayed := range []string{"", "true"} {
		w := post(r, "/charges", "k", `{}`)
		if w.Code != http.StatusCreated || w.Header().Get("Location") != "/charges/1" || w.Body.String() != "charged" || w.Header().Get("Idempotent-Replayed") != replayed {
			t.Fatalf("request %d: %d Location %q replayed %q %q", i, w.Code, w.Header().Get("Location"), w.Header().Get("Idempotent-Replayed"), w.Body)
		}
	}
}

// A status set without a body (c.Status(204)) is the answer stored, not the
// 200 the core sends for a handler that wrote nothing.
func TestGinStatusWithoutBodyIsStored(t *testing.T) {
	r := newGin(t)
	r.POST("/charges", func(c *gin.Context) { c.Status(http.StatusNoContent) })
	for i, replayed := range []string{"", "true"} {
		if w := post(r, "/charges", "k", `{}`); w.Code != http.StatusNoContent || w.Header().Get("Idempotent-Replayed") != replayed {
			t.Fatalf("request %d: %d replayed %q, want 204", i, w.Code, w.Header().Get("Idempotent-Replayed"))
		}
	}
}

// A handler that panics, under gin.Recovery: the key is released (the retry
// runs again), and the writer recovery answers with is gin's own.
func TestGinPanicReleasesTheKey(t *testing.T) {
	r := newGin(t)
	calls := 0
	r.POST("/charges", func(c *gin.Context) {
		calls++
		if calls == 1 {
			panic("bug")
		}
		c.String(http.StatusCreated, "charged")
	})
	if w := post(r, "/charges", "k", `{}`); w.Code != http.StatusInternalServerError {
		t.Fatalf("first: %d %s, want gin.Recovery's 500", w.Code, w.Body)
	}
	if w := post(r, "/charges", "k", `{}`); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry: %d replayed %q, want the handler run again", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
	if calls != 2 {
		t.Fatalf("handler ran %d times, want 2", calls)
	}
}

// GET is not tracked and goes through as gin answers it; a keyed POST to no
// route is not tracked either (nothing runs): each gets gin's 404 with its
// text, none a replay; the context's writer and request are gin's own again
// after the middleware.
func TestGinUntrackedNoRouteAndRestored(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	var seen gin.ResponseWriter
	r.Use(func(c *gin.Context) {
		seen = c.Writer
		req := c.Request
		c.Next()
		if c.Writer != seen || c.Request != req {
			t.Errorf("after the middleware, c.Writer is %T (request restored: %v)", c.Writer, c.Request == req)
		}
	}, frameworks.GinMiddleware(newIdem(t)))
	r.GET("/charges", func(c *gin.Context) { c.String(http.StatusOK, "list") })
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest("GET", "/charges", nil))
	if w.Code != http.StatusOK || w.Body.String() != "list" {
		t.Fatalf("GET: %d %s", w.Code, w.Body)
	}
	for i := range 2 {
		if w := post(r, "/nowhere", "k", `{}`); w.Code != http.StatusNotFound || w.Body.String() != "404 page not found" || w.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("POST %d to no route: %d %q replayed %q, want gin's 404", i, w.Code, w.Body, w.Header().Get("Idempotent-Replayed"))
		}
	}
}
