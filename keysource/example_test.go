package keysource_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/keysource"
	"github.com/idemproxy/idemproxy/middleware"
)

// Keys in the body: a JSON pointer (Square's idempotency_key, say).
func ExampleNewJSON() {
	ks, _ := keysource.NewJSON("/idempotency_key")
	store, _ := memstore.New(memstore.Options{})
	defer store.Close()
	idem, _ := middleware.New(store, func(s *middleware.Settings) { s.KeySource = ks })
	h := idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	for range 2 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/v2/payments", strings.NewReader(`{"idempotency_key":"4935a656","amount":100}`)))
		fmt.Println(w.Code, "replayed:", w.Header().Get("Idempotent-Replayed") == "true")
	}
	// Output:
	// 201 replayed: false
	// 201 replayed: true
}
