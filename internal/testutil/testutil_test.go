package testutil_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// Send puts the request-target on the wire byte for byte, with the method,
// Host, key and headers given.
func TestSendIsByteForByte(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.RequestURI+" "+r.Host+" "+r.Header.Get("Idempotency-Key")+" "+r.Header.Get("X-A"))
		mu.Unlock()
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(202)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, c := range []struct {
		q    testutil.Request
		want string
	}{
		{testutil.Request{Method: "post", Target: "/a/../b;x=1", Host: "API.example:80", Key: "k", Header: map[string]string{"x-a": "1"}}, "post /a/../b;x=1 API.example:80 k 1"},
		{testutil.Request{Target: "/ch%61rges?x=%2F"}, "POST /ch%61rges?x=%2F " + addr + "  "},
		{testutil.Request{Target: "//charges"}, "POST //charges " + addr + "  "},
		{testutil.Request{}, "POST / " + addr + "  "},
		{testutil.KeyedPost("/pay", "k2", "x", "X-A", "2"), "POST /pay api.example k2 2"},
	} {
		r := testutil.Send(t, addr, c.q)
		mu.Lock()
		last := got[len(got)-1]
		mu.Unlock()
		if last != c.want || r.Status != 202 || !r.Replayed {
			t.Errorf("%+v: the server saw %q, answered %d replayed=%v; want %q", c.q, last, r.Status, r.Replayed, c.want)
		}
	}
	if d := testutil.Delivery("/h", "{}", map[string]string{"content-type": "text/plain"}); d.Header["Content-Type"] != "text/plain" || len(d.Header) != 1 {
		t.Errorf("a delivery's own Content-Type: %v", d.Header)
	}
	if _, err := testutil.Do(context.Background(), testutil.FreeAddr(t), testutil.Request{}); err == nil {
		t.Error("Do to a closed port: no error")
	}
}

// The upstream counts by name, by "METHOD path" and in total, and answers as
// the path says.
func TestUpstream(t *testing.T) {
	up := testutil.NewUpstream(t)
	addr := strings.TrimPrefix(up.URL, "http://")
	a := testutil.Send(t, addr, testutil.Request{Target: "/pay", Key: "k", Body: "b"})
	b := testutil.Send(t, addr, testutil.Request{Target: "/pay", Key: "k", Body: "c"})
	if a.Status != 201 || a.Body != "executed k #1 with b" || b.Body != "executed k #2 with c" || b.Header.Get("X-Execution") != "2" {
		t.Fatalf("answers: %+v %+v", a, b)
	}
	if f := testutil.Send(t, addr, testutil.Request{Target: "/fail", Key: "f"}); f.Status != 500 {
		t.Fatalf("/fail: %+v", f)
	}
	if big := testutil.Send(t, addr, testutil.Request{Target: "/big?kib=3"}); len(big.Body) != 3<<10 {
		t.Fatalf("/big?kib=3: %d bytes", len(big.Body))
	}
	done := make(chan testutil.Response)
	go func() {
		r, _ := testutil.Do(context.Background(), addr, testutil.Request{Target: "/block", Key: "bk"})
		done <- r
	}()
	if name := <-up.Started; name != "bk" {
		t.Fatalf("started %q", name)
	}
	select {
	case r := <-done:
		t.Fatalf("/block answered before its release: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	up.Release <- struct{}{}
	if r := <-done; r.Status != 201 {
		t.Fatalf("/block after its release: %+v", r)
	}
	if up.Count("k") != 2 || up.Path("POST /pay") != 2 || up.Total() != 5 || up.Paths()["POST /block"] != 1 {
		t.Fatalf("counts: k %d, POST /pay %d, total %d, paths %v", up.Count("k"), up.Path("POST /pay"), up.Total(), up.Paths())
	}

	byAuth := testutil.NewUpstream(t, testutil.CountBy(testutil.ByHeader("Authorization", "Idempotency-Key")))
	testutil.Send(t, strings.TrimPrefix(byAuth.URL, "http://"), testutil.Request{Key: "k", Header: map[string]string{"Authorization": "Bearer a"}})
	if byAuth.Count("Bearer a k") != 1 {
		t.Fatalf("by header: %v", byAuth.Paths())
	}

	d := testutil.NewDeliveries(t)
	daddr := strings.TrimPrefix(d.URL, "http://")
	if r := testutil.Send(t, daddr, testutil.Request{Method: "GET"}); r.Status != 200 || r.Body != "" {
		t.Fatalf("GET on deliveries: %+v", r)
	}
	if r := testutil.Send(t, daddr, testutil.Delivery("/h", "{}", nil)); r.Status != 200 || r.Body != "processed #1" || d.Count("POST") != 1 {
		t.Fatalf("POST on deliveries: %+v, %d", r, d.Count("POST"))
	}
}
