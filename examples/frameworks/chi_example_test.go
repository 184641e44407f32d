package frameworks_test

import (
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/middleware"
)

// chi takes Handler.Wrap as its middleware. The core's answers (a replay, a
// 422) go through chi's chain like any handler's; URL parameters reach the
// handler of a first execution.
func Example_chi() {
	store, _ := memstore.New(memstore.Options{})
	defer store.Close()
	idem, _ := middleware.New(store)

	charges := 0
	r := chi.NewRouter()
	r.Use(idem.Wrap) // or r.With(idem.Wrap).Post(…) for some routes
	r.Post("/accounts/{account}/charges", func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"account":%q,"charge":%d}`, chi.URLParam(r, "account"), charges)
	})

	send(r, "/accounts/acme/charges", "order-1", `{"amount":100}`)
	send(r, "/accounts/acme/charges", "order-1", `{"amount":100}`) // a retry
	send(r, "/accounts/acme/charges", "order-1", `{"amount":999}`) // the key reused
	fmt.Println("charges:", charges)
	// Output:
	// 201 replayed= {"account":"acme","charge":1}
	// 201 replayed=true {"account":"acme","charge":1}
	// 422 replayed= urn:idemproxy:problem:mismatch
	// charges: 1
}
