package proxy_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

var binPath string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() { // the end-to-end tests skip themselves; no binary needed
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "idemproxy-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "idemproxy")
	out, err := exec.Command("go", "build", "-race", "-o", binPath, "../cmd/idemproxy").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building idemproxy: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runBin runs the binary to completion and returns its exit code and its
// combined output. A run that outlives its deadline is killed and fails the
// test at once, rather than hanging the package until go test's timeout.
func runBin(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("idemproxy %s: still running after 60s, killed\n%s", strings.Join(args, " "), out.String())
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	default:
		t.Fatalf("idemproxy %s: %v", strings.Join(args, " "), err)
		return -1, ""
	}
}

// upstream counts executions per Idempotency-Key and answers as the path says:
// /slow?ms=N sleeps, /block waits for release, /fail answers 500.
type upstream struct {
	*httptest.Server
	mu      sync.Mutex
	perKey  map[string]int
	total   atomic.Int64
	release chan struct{}
	started chan string
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{perKey: map[string]int{}, release: make(chan struct{}), started: make(chan string, 100)}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key") + r.Header.Get("X-GitHub-Delivery")
		u.mu.Lock()
		u.perKey[key]++
		n := u.perKey[key]
		u.mu.Unlock()
		u.total.Add(1)
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/block":
			u.started <- key
			select {
			case <-u.release:
			case <-r.Context().Done(): // its proxy was killed
				return
			}
		case "/slow":
			var ms int
			fmt.Sscan(r.URL.Query().Get("ms"), &ms)
			u.started <- key
			time.Sleep(time.Duration(ms) * time.Millisecond)
		case "/fail":
			w.WriteHeader(500)
			return
		}
		w.Header().Set("X-Execution", fmt.Sprint(n))
		w.WriteHeader(201)
		fmt.Fprintf(w, "executed %s #%d with %s", key, n, body)
	}))
	t.Cleanup(func() {
		select {
		case <-u.release:
		default:
			close(u.release)
		}
		u.Close()
	})
	return u
}

func (u *upstream) count(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.perKey[key]
}

type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string
	admin  string
	stderr *syncBuffer
	done   chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// start runs the binary with --listen and --admin on free ports and waits until
// /healthz answers.
func start(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, addr: testutil.FreeAddr(t), admin: testutil.FreeAddr(t), stderr: &syncBuffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(binPath, append([]string{"--listen", p.addr, "--admin", p.admin, "--log-format", "json"}, args...)...)
	p.cmd.Stderr = p.stderr
	p.cmd.Stdout = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("idemproxy log:\n%s", p.stderr)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + p.admin + "/healthz")
		if err == nil {
			resp.Body.Close()
			return p
		}
		select {
		case err := <-p.done:
			p.done <- err // for the cleanup, which waits for it
			t.Fatalf("idemproxy exited at start: %v\n%s", err, p.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("idemproxy did not come up\n%s", p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type result struct {
	status   int
	body     string
	replayed bool
	header   http.Header
}

func send(t *testing.T, base, path, key, body string, hdr ...string) result {
	t.Helper()
	r, err := sendErr(context.Background(), base, path, key, body, hdr...)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	return r
}

func sendErr(ctx context.Context, base, path, key, body string, hdr ...string) (result, error) {
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+base+path, strings.NewReader(body))
	// One Host for every instance, as behind a load balancer: the Host is part of
	// a key's scope.
	req.Host = "api.example"
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, string(b), resp.Header.Get("Idempotent-Replayed") == "true", resp.Header}, nil
}

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped under -short")
	}
}
