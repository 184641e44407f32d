package middleware_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A small answer (within net/http's write buffer) gets no write deadline and no
// early flush: net/http still frames it with a Content-Length, first execution
// and replay alike. A large one arrives whole, through the moving deadline.
func TestAnswersKeepTheirFramingUnderTheWriteDeadline(t *testing.T) {
	big := strings.Repeat("b", 1<<20)
	h := newHandler(t, newMem(t))
	srv := httptest.NewServer(h.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			_, _ = io.WriteString(w, big)
			return
		}
		_, _ = io.WriteString(w, "small answer") // no Content-Length set
	})))
	defer srv.Close()
	post := func(path, key string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, replay := range []bool{false, true} {
		resp := post("/small", "small")
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "small answer" || resp.ContentLength != int64(len(b)) || len(resp.TransferEncoding) != 0 ||
			(resp.Header.Get("Idempotent-Replayed") == "true") != replay {
			t.Errorf("small answer (replay %v): %q length %d %v", replay, b, resp.ContentLength, resp.TransferEncoding)
		}
		resp = post("/big", "big")
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != big || (resp.Header.Get("Idempotent-Replayed") == "true") != replay {
			t.Errorf("big answer (replay %v): %d bytes", replay, len(b))
		}
	}
}
