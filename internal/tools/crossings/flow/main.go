// Command flow serves one keyed POST through the middleware on the memory
// store, then the same POST again (an ordinary replay), with the default
// settings. It is the program internal/tools/crossings runs under dlv trace:
// phase marks where each request begins, so the trace can be cut by request.
package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/middleware"
)

//go:noinline
func phase(name string) { _ = name }

func main() {
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer store.Close()
	h, err := middleware.New(store)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	app := h.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"ord_1"}`))
	}))
	for _, name := range []string{"first", "replay"} {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"amount":1}`))
		r.Header.Set("Idempotency-Key", "crossings-1")
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		phase(name)
		app.ServeHTTP(w, r)
		phase("end")
		if want := name == "replay"; (w.Header().Get("Idempotent-Replayed") == "true") != want {
			fmt.Fprintf(os.Stderr, "%s: status %d, replayed %q\n", name, w.Code, w.Header().Get("Idempotent-Replayed"))
			os.Exit(1)
		}
	}
}
