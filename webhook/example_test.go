package webhook_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/webhook"
)

// A GitHub webhook receiver: the signature is verified before anything is
// claimed, and the signed body is the key, so a redelivery (or a captured body
// sent again under a new delivery id) is answered from the store.
func ExampleNew() {
	v, err := webhook.New(webhook.Webhook{Preset: webhook.GitHub, Secrets: []string{"It's a Secret to Everybody"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	store, _ := memstore.New(memstore.Options{})
	defer store.Close()
	idem, _ := middleware.New(store, func(s *middleware.Settings) {
		s.Verifier, s.KeySource = v, v.KeySource()
	})
	runs := 0
	h := idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		fmt.Fprintf(w, "handled #%d", runs)
	}))
	deliver := func(signature, delivery, host string) {
		r := httptest.NewRequest("POST", "http://"+host+"/webhooks/github", strings.NewReader("Hello, World!"))
		r.Header.Set("X-Hub-Signature-256", signature)
		r.Header.Set("X-GitHub-Delivery", delivery)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("Idempotent-Replayed") == "true", strings.SplitN(w.Body.String(), ",", 2)[0])
	}
	// GitHub's documented example signature.
	const sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	deliver(sig, "d-1", "api.example")
	deliver(sig, "d-1", "api.example")
	deliver(sig, "d-forged", "another.example") // a captured delivery, elsewhere
	deliver("sha256=00", "d-2", "api.example")
	// Output:
	// 200 false handled #1
	// 200 true handled #1
	// 200 true handled #1
	// 401 false {"type":"urn:idemproxy:problem:invalid-signature"
}
