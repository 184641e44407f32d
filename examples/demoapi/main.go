// Command demoapi is a tiny payments-like API to put idemproxy in front of. It has no
// idempotency of its own: every POST /charges creates a new charge.
//
//	POST /charges          {"amount": 100}   → 201 with a new charge id, and its Location
//	     ?delay=3s                           (answers after a delay, to see a 409; up to 1m)
//	GET  /charges                            → every charge created so far
//	GET  /charges/{id}                       → one charge
//	POST /flaky                              → 503 (never stored: a retry runs again)
//	POST /webhooks         (any body)        → 200, the delivery recorded (webhook receiver)
//	GET  /webhooks                           → every delivery received so far
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"sync"
	"time"
)

type charge struct {
	ID     string          `json:"id"`
	Amount json.RawMessage `json:"amount"`
	At     time.Time       `json:"created_at"`
}

func main() {
	listen := flag.String("listen", "127.0.0.1:3000", "address to listen on")
	flag.Parse()

	var mu sync.Mutex
	var charges []charge
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		if d, err := time.ParseDuration(r.URL.Query().Get("delay")); err == nil && d > 0 && d <= time.Minute {
			time.Sleep(d)
		}
		var in struct {
			Amount json.RawMessage `json:"amount"`
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err := json.Unmarshal(body, &in); err != nil || len(in.Amount) == 0 {
			http.Error(w, `{"error":"want a JSON body like {\"amount\": 100}"}`, http.StatusBadRequest)
			return
		}
		mu.Lock()
		c := charge{ID: fmt.Sprintf("ch_%d", len(charges)+1), Amount: in.Amount, At: time.Now().UTC()}
		charges = append(charges, c)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/charges/"+c.ID)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(c)
	})
	mux.HandleFunc("GET /charges", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"count": len(charges), "charges": charges})
	})
	mux.HandleFunc("GET /charges/{id}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range charges {
			if c.ID == r.PathValue("id") {
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(c)
				return
			}
		}
		http.Error(w, `{"error":"no such charge"}`, http.StatusNotFound)
	})
	var deliveries []json.RawMessage
	mux.HandleFunc("POST /webhooks", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if !json.Valid(body) {
			body, _ = json.Marshal(string(body))
		}
		mu.Lock()
		deliveries = append(deliveries, body)
		n := len(deliveries)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"received\":%d}\n", n)
	})
	mux.HandleFunc("GET /webhooks", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"deliveries": len(deliveries), "events": deliveries})
	})
	mux.HandleFunc("POST /flaky", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"temporarily unavailable"}`, http.StatusServiceUnavailable)
	})
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("demoapi listening on %s", *listen)
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "demoapi:", err)
		os.Exit(1)
	}
}
