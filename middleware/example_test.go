package middleware_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/middleware"
)

// The quick start: a net/http mux wrapped whole. The first POST runs, its
// retry gets the stored answer, and GET passes through untouched.
func Example() {
	store, err := memstore.New(memstore.Options{}) // one process; redisstore, pgstore or dynamostore to share
	if err != nil {
		panic(err)
	}
	defer store.Close()
	idem, err := middleware.New(store, func(s *middleware.Settings) { s.RequireKey = true })
	if err != nil {
		panic(err)
	}
	orders := 0
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		orders++
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", orders))
		w.WriteHeader(http.StatusCreated)
	})
	mux.HandleFunc("GET /orders", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%d orders", orders)
	})
	h := idem.Wrap(mux) // http.ListenAndServe(":8080", idem.Wrap(mux))

	for _, method := range []string{"POST", "POST", "GET"} {
		r := httptest.NewRequest(method, "/orders", strings.NewReader(`{"sku":"tea"}`))
		r.Header.Set("Idempotency-Key", "5f0c9a1e-order-1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(method, w.Code, w.Header().Get("Location")+w.Body.String(), "replayed="+w.Header().Get("Idempotent-Replayed"))
	}
	// Output:
	// POST 201 /orders/1 replayed=
	// POST 201 /orders/1 replayed=true
	// GET 200 1 orders replayed=
}

// Every answer a client can meet: the first run, a replay, the same key with
// another request (422), and no key where one is required (400). The core's
// own answers are RFC 9457 problems (Settings.ErrorFormat for another shape).
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

// A retry that arrives while the first request still runs gets 409 with
// Retry-After (Settings.Wait makes it wait for the answer instead); once the
// first is done, the retry gets its stored answer.
func ExampleHandler_Wrap_inFlight() {
	store, _ := memstore.New(memstore.Options{})
	defer store.Close()
	idem, _ := middleware.New(store)

	running, finish := make(chan struct{}), make(chan struct{})
	h := idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(running)
		<-finish // a slow payment provider
		fmt.Fprint(w, "paid")
	}))
	send := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/payments", strings.NewReader(`{"amount":100}`))
		r.Header.Set("Idempotency-Key", "pay-1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- send() }()
	<-running
	w := send() // the client gave up waiting and retried
	fmt.Println(w.Code, "Retry-After:", w.Header().Get("Retry-After"), w.Header().Get("Idempotency-Problem"))
	close(finish)
	w = <-first
	fmt.Println(w.Code, w.Body.String())
	w = send()
	fmt.Println(w.Code, w.Body.String(), "replayed:", w.Header().Get("Idempotent-Replayed"))
	// Output:
	// 409 Retry-After: 1 urn:idemproxy:problem:in-flight
	// 200 paid
	// 200 paid replayed: true
}

// Handle is for a router whose handlers return an error (Caddy's, echo's): an
// error from next releases the key, so that the retry runs again, and comes
// back to the caller unchanged to answer as it does for any other error.
func ExampleHandler_Handle() {
	store, _ := memstore.New(memstore.Options{})
	defer store.Close()
	idem, _ := middleware.New(store)

	errUnavailable := errors.New("inventory unavailable")
	calls := 0
	next := middleware.NextFunc(func(w http.ResponseWriter, r *http.Request) error {
		calls++
		if calls == 1 {
			return errUnavailable // nothing written: the caller answers
		}
		w.WriteHeader(http.StatusCreated)
		return nil
	})
	for range 3 {
		r := httptest.NewRequest("POST", "/reservations", strings.NewReader(`{"seat":"12A"}`))
		r.Header.Set("Idempotency-Key", "seat-12A")
		w := httptest.NewRecorder()
		if err := idem.Handle(w, r, next); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
		fmt.Printf("%d %q replayed=%s\n", w.Code, strings.TrimSpace(w.Body.String()), w.Header().Get("Idempotent-Replayed"))
	}
	fmt.Println("calls:", calls)
	// Output:
	// 503 "inventory unavailable" replayed=
	// 201 "" replayed=
	// 201 "" replayed=true
	// calls: 2
}

// The observer sees every tracked request's outcome: count it, log it, or
// give it to package prommetrics (the proxy's Prometheus metrics).
func ExampleEvent() {
	store, _ := memstore.New(memstore.Options{})
	defer store.Close()
	idem, _ := middleware.New(store, func(s *middleware.Settings) {
		s.Observer = func(ev middleware.Event) {
			fmt.Println(ev.Outcome, ev.Status, ev.KeyHash != "")
		}
	})
	h := idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, key := range []string{"k-1", "k-1", ""} {
		r := httptest.NewRequest("POST", "/", nil)
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	// Output:
	// stored 200 true
	// replayed 200 true
	// bypass 200 false
}

func ExampleParseStatuses() {
	s, _ := middleware.ParseStatuses("2xx", "409", "!202")
	fmt.Println(s.Has(201), s.Has(202), s.Has(409), s.Has(500))
	// Output: true false true false
}
