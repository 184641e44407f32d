package caddy_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache/dynamostore/dynamotest"
	"github.com/idemproxy/idemproxy/internal/testutil"
)

// Two Caddy processes on one DynamoDB table (DynamoDB Local, reached through
// the AWS environment Caddy inherits): a request runs once whichever instance
// gets it, the other replays it (a response larger than the record item too,
// byte for byte), a duplicate in flight gets 409 and a reused key 422; `caddy
// validate` refuses a missing table with creation off, naming idemproxy migrate.
func TestCaddyDynamoDB(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	srv := dynamotest.StartOwn(t)
	srv.Env(t)
	bin := caddyBinary(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10/16) // 64 KiB: chunk items
	var calls atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		switch r.URL.Path {
		case "/slow":
			time.Sleep(time.Second)
		case "/big":
			w.WriteHeader(201)
			w.Write(big)
			return
		}
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"charge":%d}`, n)
	}))
	defer upstream.Close()
	// caddy writes a Caddyfile with the store and returns its path.
	caddy := func(store string) string {
		dir := t.TempDir()
		cfg := fmt.Sprintf(globalOptions(dir)+":0 {\n\trespond /healthz 200\n\tidempotency {\n\t\tstore %s\n\t\tlock_ttl 10s\n\t}\n\treverse_proxy %s\n}\n",
			store, strings.TrimPrefix(upstream.URL, "http://"))
		path := filepath.Join(dir, "Caddyfile")
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}

	// With creation off, a missing table fails provisioning with one reason.
	missing := caddy("dynamodb caddy_missing {\n\t\t\tcreate_table false\n\t\t}")
	code, out := testutil.Run(t, bin, []string{"validate", "--config", missing, "--adapter", "caddyfile"})
	if code == 0 || !strings.Contains(out, "idemproxy migrate") {
		t.Fatalf("caddy validate with a missing table: exit %d\n%s", code, out)
	}

	var bases []string
	for _, store := range []string{"dynamodb caddy_idem {\n\t\t\tinline_limit 1KiB\n\t\t}", "dynamodb://caddy_idem {\n\t\t\tinline_limit 1KiB\n\t\t}"} {
		path := caddy(store)
		bases = append(bases, "http://"+runCaddy(t, bin, filepath.Dir(path), path).Addr)
	}
	a, b := bases[0], bases[1]
	// One Host for both instances, as behind a load balancer: the Host is part
	// of a key's scope.
	post := func(url, key, body string) (int, string, bool) {
		t.Helper()
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Host = "api.example"
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", url, err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(got), resp.Header.Get("Idempotent-Replayed") == "true"
	}

	code, first, replayed := post(a+"/pay", "k1", "x")
	if code != 201 || replayed {
		t.Fatalf("first: %d %q replayed=%v", code, first, replayed)
	}
	if code, body, replayed := post(b+"/pay", "k1", "x"); code != 201 || !replayed || body != first || calls.Load() != 1 {
		t.Fatalf("replay on the other instance: %d %q replayed=%v, upstream ran %d times", code, body, replayed, calls.Load())
	}
	if code, body, _ := post(b+"/pay", "k1", "other"); code != 422 {
		t.Fatalf("reused key: %d %q", code, body)
	}
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", a+"/slow", nil)
		req.Host = "api.example"
		req.Header.Set("Idempotency-Key", "s1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	deadline := time.Now().Add(10 * time.Second)
	for calls.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if code, body, _ := post(b+"/slow", "s1", ""); code != 409 {
		t.Fatalf("duplicate in flight on the other instance: %d %q", code, body)
	}
	if code := <-done; code != 201 || calls.Load() != 2 {
		t.Fatalf("the slow first: %d, upstream ran %d times", code, calls.Load())
	}

	code, body, _ := post(a+"/big", "b1", "")
	if code != 201 || body != string(big) {
		t.Fatalf("large response: %d, %d bytes", code, len(body))
	}
	if code, body, replayed := post(b+"/big", "b1", ""); code != 201 || !replayed || body != string(big) || calls.Load() != 3 {
		t.Fatalf("large replay on the other instance: %d, %d bytes, identical %v, replayed=%v, upstream ran %d times",
			code, len(body), body == string(big), replayed, calls.Load())
	}
}
