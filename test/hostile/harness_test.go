// Package hostile_test is idemproxy's adversarial suite: it drives the built
// proxy's entrance, over real sockets, with what a client controls (the case,
// encoding and parameters of the request line, the Host's spelling, cookies,
// sizes and pace) and holds the promises: an operation never runs twice, a
// protection is never skipped, one client never reads another's answer, and the
// proxy is not exhausted. Variants come from a seeded generator (the seed is
// logged; HOSTILE_SEED replays one), so a failure is reproducible.
package hostile_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

var bin string

func TestMain(m *testing.M) {
	flag.Parse()
	code := func() int {
		if testing.Short() {
			return m.Run() // every test here skips itself
		}
		dir, err := os.MkdirTemp("", "idemproxy-hostile")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "idemproxy")
		if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/idemproxy").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building idemproxy: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("adversarial suite: runs the built proxy; skipped under -short")
	}
}

// rng returns the test's generator, seeded from HOSTILE_SEED or the clock, and
// logs the seed.
func rng(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("HOSTILE_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("HOSTILE_SEED=%d", seed)
	return rand.New(rand.NewPCG(seed, 0x1d3))
}

// upstream counts what reaches it: by the X-Op header the suite puts on every
// request (one logical operation), and in total.
type upstream struct {
	*httptest.Server
	mu    sync.Mutex
	ops   map[string]int
	paths map[string]int
	n     int
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{ops: map[string]int{}, paths: map[string]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		u.mu.Lock()
		u.n++
		u.ops[r.Header.Get("X-Op")]++
		u.paths[r.Method+" "+r.URL.EscapedPath()]++
		n := u.ops[r.Header.Get("X-Op")]
		u.mu.Unlock()
		w.Header().Set("X-Run", strconv.Itoa(n))
		w.WriteHeader(201)
		fmt.Fprintf(w, "op %s run %d", r.Header.Get("X-Op"), n)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) runs(op string) int { u.mu.Lock(); defer u.mu.Unlock(); return u.ops[op] }
func (u *upstream) total() int         { u.mu.Lock(); defer u.mu.Unlock(); return u.n }

// proc is a running proxy.
type proc struct {
	addr, admin string
	logs        *testutil.SyncBuffer
}

// start runs the proxy with the config file text (upstream and ports are
// flags) and the environment, and waits until it answers.
func start(t *testing.T, up *upstream, config string, env ...string) *proc {
	t.Helper()
	p := &proc{addr: testutil.FreeAddr(t), admin: testutil.FreeAddr(t), logs: &testutil.SyncBuffer{}}
	cfg := filepath.Join(t.TempDir(), "idemproxy.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", cfg, "--listen", p.addr, "--admin", p.admin, "--log-format", "json", "--log-level", "warn"}
	if up != nil {
		args = append(args, "--upstream", up.URL)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("idemproxy log:\n%s", p.logs)
		}
	})
	testutil.Eventually(t, 10*time.Second, "the proxy to answer", func() bool {
		select {
		case <-done:
			t.Fatalf("idemproxy exited at start:\n%s", p.logs)
		default:
		}
		c, err := net.Dial("tcp", p.admin)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return p
}

// answer is what a request got back.
type answer struct {
	status   int
	body     string
	header   http.Header
	replayed bool
}

// req is one request with everything a client controls.
type req struct {
	method, target, host, body string
	header                     map[string]string
}

// send sends r byte for byte (the request-target as given) and reads the answer.
func (p *proc) send(t *testing.T, r req) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, r.method, "http://"+p.addr+"/", strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(r.target, "//") {
		// An Opaque of "//x" would be sent as an absolute URI with host x.
		hr.URL.Path, _ = url.PathUnescape(r.target)
		hr.URL.RawPath = r.target
	} else {
		hr.URL.Opaque = r.target // sent byte for byte as the request-target
	}
	hr.Host = r.host
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatalf("%s %s (Host %q): %v", r.method, r.target, r.host, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b), resp.Header, resp.Header.Get("Idempotent-Replayed") == "true"}
}

// raw writes text on a fresh connection and returns everything read back until
// the server closes it or the deadline passes.
func (p *proc) raw(t *testing.T, text string, deadline time.Duration) string {
	t.Helper()
	c, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(deadline))
	if _, err := io.WriteString(c, text); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	io.Copy(&out, c)
	return out.String()
}

func with(h map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}
