package middleware_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/middleware"
)

func ExampleHandler_Wrap() {
	store, _ := memstore.New(memstore.Options{})
	defer store.Close()
	idem, _ := middleware.New(store, func(s *middleware.Settings) { s.RequireKey = true })

	charges := 0
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charge #%d", charges)
	})
	h := idem.Wrap(api)

	send := func(key, body string) {
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(body))
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("Idempotent-Replayed"), w.Body.String())
	}
	send("order-1", `{"amount":100}`)
	send("order-1", `{"amount":100}`) // a retry: replayed, not charged again
	send("order-1", `{"amount":999}`) // same key, other request
	send("", `{"amount":100}`)        // key required
	fmt.Println("charges:", charges)
	// Output:
	// 201  charge #1
	// 201 true charge #1
	// 422  {"type":"urn:idemproxy:problem:mismatch","title":"Idempotency key reused with a different request","status":422,"detail":"this idempotency key was already used with a different request (method, path, query or body)"}
	// 400  {"type":"urn:idemproxy:problem:missing-key","title":"Idempotency key required","status":400,"detail":"this request requires an Idempotency-Key header"}
	// charges: 1
}

func ExampleParseStatuses() {
	s, _ := middleware.ParseStatuses("2xx", "409", "!202")
	fmt.Println(s.Has(201), s.Has(202), s.Has(409), s.Has(500))
	// Output: true false true false
}
