package proxy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkProxyFirstExecution is a keyed POST through the proxy's handler
// (memory store, a local upstream, a new key each time): routing, the core,
// the attempt upstream and the stored answer.
func BenchmarkProxyFirstExecution(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(201)
		io.WriteString(w, `{"ok":true}`)
	}))
	defer up.Close()
	cfg, err := ParseArgs([]string{"--upstream", up.URL, "--log-level", "error"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	p, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		r := httptest.NewRequest("POST", "/v1/charges", strings.NewReader(`{"amount":1}`))
		r.Header.Set("Idempotency-Key", "key-"+strconv.Itoa(i))
		w := httptest.NewRecorder()
		p.ServeHTTP(w, r)
		if w.Code != 201 {
			b.Fatal(w.Code, w.Body.String())
		}
	}
}
