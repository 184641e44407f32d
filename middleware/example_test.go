package middleware_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/middleware"
)

func ExampleHandler_Wrap() {
	store, _ := memstore.New()
	defer store.Close()
	idem, _ := middleware.New(store, middleware.WithRequireKey(true))

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

// Config is the settings as data (from JSON or YAML, say); Options bridges it to
// New. Unset fields keep their defaults; set ones win, zero included.
func ExampleConfig() {
	var cfg middleware.Config
	_ = json.Unmarshal([]byte(`{"require_key": true, "ttl": "48h", "max_body": "1MiB", "handler_timeout": "0s"}`), &cfg)
	opts, err := cfg.Options()
	if err != nil {
		fmt.Println(err)
		return
	}
	store, _ := memstore.New()
	defer store.Close()
	if _, err := middleware.New(store, opts...); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(*cfg.RequireKey, cfg.TTL, *cfg.MaxBody, cfg.HandlerTimeout)
	bad := middleware.Config{Methods: []string{"post"}}
	fmt.Println(bad.Validate())
	// Output:
	// true 48h0m0s 1MiB 0s
	// methods: "post" is not an upper-case HTTP method token (write methods in upper case, POST; requests match it in any case)
}

// A GitHub webhook receiver: the signature is verified before anything is
// claimed, and the signed body is the key, so a redelivery (or a captured body
// sent again under a new delivery id) is answered from the store.
func ExampleWithWebhook() {
	store, _ := memstore.New()
	defer store.Close()
	idem, _ := middleware.New(store,
		middleware.WithWebhook(middleware.Webhook{Preset: middleware.WebhookGitHub, Secrets: []string{"It's a Secret to Everybody"}}),
		middleware.WithScopeHeaders(), // deliveries carry no Authorization
	)
	runs := 0
	h := idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		fmt.Fprintf(w, "handled #%d", runs)
	}))
	deliver := func(signature, delivery string) {
		r := httptest.NewRequest("POST", "/webhooks/github", strings.NewReader("Hello, World!"))
		r.Header.Set("X-Hub-Signature-256", signature)
		r.Header.Set("X-GitHub-Delivery", delivery)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("Idempotent-Replayed") == "true", strings.SplitN(w.Body.String(), ",", 2)[0])
	}
	// GitHub's documented example signature.
	const sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	deliver(sig, "d-1")
	deliver(sig, "d-1")
	deliver(sig, "d-forged")
	deliver("sha256=00", "d-2")
	// Output:
	// 200 false handled #1
	// 200 true handled #1
	// 200 true handled #1
	// 401 false {"type":"urn:idemproxy:problem:invalid-signature"
}

// Keys in the body: a JSON pointer (Square's idempotency_key, say).
func ExampleWithKeySource() {
	store, _ := memstore.New()
	defer store.Close()
	idem, _ := middleware.New(store, middleware.WithKeySource("json:/idempotency_key"))
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
