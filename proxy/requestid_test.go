package proxy

import (
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// A generated request id has the form crypto/rand.Text gives (26 characters
// of A–Z and 2–7), is well formed as a request id, and does not repeat, also
// when generated concurrently.
func TestRequestIDGenerated(t *testing.T) {
	const workers, each = 4, 2500
	ids := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range ids {
		wg.Go(func() {
			for range each {
				ids[w] = append(ids[w], newRequestID())
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	var counts [256]int
	for _, list := range ids {
		for _, id := range list {
			if len(id) != 26 || strings.Trim(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") != "" || !validRequestID(id) {
				t.Fatalf("request id %q: want 26 characters of A-Z, 2-7", id)
			}
			if seen[id] {
				t.Fatalf("request id %q generated twice", id)
			}
			seen[id] = true
			for i := range len(id) {
				counts[id[i]]++
			}
		}
	}
	// Every one of the 32 characters turns up, near evenly: 260,000 draws,
	// 8,125 expected each (standard deviation 89): 7,600..8,650 is ±5.9 of them.
	for _, c := range base32Alphabet {
		if n := counts[c]; n < 7600 || n > 8650 {
			t.Errorf("character %c drawn %d times of %d, want about %d", c, n, workers*each*26, workers*each*26/32)
		}
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Request-Id", "spoofed")
	f, _ := newForwarding(&Config{RequestIDHeader: "X-Request-Id"})
	if info := f.inbound(r); info.requestID == "spoofed" || r.Header.Get("X-Request-Id") != info.requestID || seen[info.requestID] {
		t.Fatalf("untrusted peer: request id %q, header %q", info.requestID, r.Header.Get("X-Request-Id"))
	}
}
