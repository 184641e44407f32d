package testutil

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// builds are the binaries Build made in this test binary, by package and flags.
var builds struct {
	mu   sync.Mutex
	dir  string
	bins map[string]*build
}

type build struct {
	once sync.Once
	path string
	err  error
}

// Build builds the main package in directory pkg (a path such as
// "../cmd/idemproxy", relative to the test's package) with the go build flags
// given, once per test binary, and returns the binary's path. The build runs
// in pkg (go build -C), so with the go.mod of the module that holds it: the
// command and the Caddy build are modules of their own. A failed build fails every test that
// asks for it. Main removes what was built.
func Build(t testing.TB, pkg string, flags ...string) string {
	t.Helper()
	key := strings.Join(append([]string{pkg}, flags...), " ")
	builds.mu.Lock()
	if builds.bins == nil {
		builds.bins = map[string]*build{}
	}
	b := builds.bins[key]
	if b == nil {
		b = &build{}
		builds.bins[key] = b
	}
	n := len(builds.bins)
	builds.mu.Unlock()
	b.once.Do(func() {
		dir, err := buildDir(n)
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, filepath.Base(pkg))
		args := append(append([]string{"build", "-C", pkg}, flags...), "-o", b.path, ".")
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatalf("building %s: %v", pkg, b.err)
	}
	return b.path
}

// buildDir is the n-th build's own folder (a binary keeps its package's name).
func buildDir(n int) (string, error) {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "idemproxy-test-bin")
		if err != nil {
			return "", err
		}
		builds.dir = dir
	}
	dir := filepath.Join(builds.dir, fmt.Sprint(n))
	return dir, os.MkdirAll(dir, 0o755)
}

// Main runs the package's tests and then removes the binaries Build made: a
// TestMain that needs nothing else is func TestMain(m *testing.M) { testutil.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	builds.mu.Lock()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
	builds.mu.Unlock()
	os.Exit(code)
}

// Run runs bin with args to completion, env added to the environment, and
// returns its exit code and its combined output. A run that outlives a minute
// is killed and fails the test at once, rather than hanging the package until
// go test's timeout.
func Run(t testing.TB, bin string, args []string, env ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = 5 * time.Second
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	name := filepath.Base(bin) + " " + strings.Join(args, " ")
	if ctx.Err() != nil {
		t.Fatalf("%s: still running after a minute, killed\n%s", name, out.String())
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	}
	t.Fatalf("%s: %v", name, err)
	return -1, ""
}

// Proc is a process a test started; it is killed when the test ends, and what
// it wrote is logged if the test failed.
type Proc struct {
	Addr  string // where it serves requests, when its starter knows
	Admin string // its admin listener, when it has one
	// Metrics is its metrics listener, when it has one and its starter knows.
	Metrics string
	Cmd     *exec.Cmd
	Logs    *SyncBuffer // what it wrote on stdout and stderr

	exited chan struct{}
	err    error // how it exited, once exited is closed
}

// Start starts bin with args, env added to the environment.
func Start(t testing.TB, bin string, args []string, env ...string) *Proc {
	t.Helper()
	p := &Proc{Cmd: exec.Command(bin, args...), Logs: &SyncBuffer{}, exited: make(chan struct{})}
	if len(env) > 0 {
		p.Cmd.Env = append(os.Environ(), env...)
	}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Logs, p.Logs
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.Cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("%s log:\n%s", filepath.Base(bin), p.Logs)
		}
	})
	return p
}

// StartIdemproxy starts the idemproxy binary at bin with --listen and --admin
// on ports it binds itself (127.0.0.1:0) and --log-format json, then args
// (which may override them), env added to the environment, and returns once
// it serves: its start-up line says where (Addr, Admin, Metrics).
func StartIdemproxy(t testing.TB, bin string, args []string, env ...string) *Proc {
	t.Helper()
	p := Start(t, bin, append([]string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-format", "json"}, args...), env...)
	p.WaitListening(t)
	return p
}

// Listening is what an idemproxy start-up line says.
type Listening struct {
	Addr           string   `json:"addr"`
	Admin          string   `json:"admin"`
	Metrics        string   `json:"metrics"`
	Routes         int      `json:"routes"`
	TrustedProxies []string `json:"trusted_proxies"`
	Store          string   `json:"store"`
}

// WaitListening waits for the idemproxy start-up line ("idemproxy listening",
// logged at info once every listener is bound: with --log-format json and a
// log level of info or below), sets Addr, Admin and Metrics from it and
// returns it. It fails the test if the process exits first or 15 s pass.
func (p *Proc) WaitListening(t testing.TB) Listening {
	t.Helper()
	var l Listening
	poll(t, 15*time.Second, 10*time.Millisecond, "the start-up line", func() bool {
		select {
		case <-p.exited:
			t.Fatalf("%s exited before it listened: %v\n%s", filepath.Base(p.Cmd.Path), p.err, p.Logs.String())
		default:
		}
		for _, line := range strings.Split(p.Logs.String(), "\n") {
			if !strings.Contains(line, `"msg":"idemproxy listening"`) {
				continue
			}
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatalf("start-up line: %v\n%s", err, line)
			}
			return true
		}
		return false
	})
	p.Addr, p.Admin, p.Metrics = l.Addr, l.Admin, l.Metrics
	return l
}

// WaitHTTP polls url until it answers (any status), and fails the test if the
// process exits first or 15 s pass.
func (p *Proc) WaitHTTP(t testing.TB, url string) {
	t.Helper()
	poll(t, 15*time.Second, 20*time.Millisecond, url+" to answer", func() bool {
		select {
		case <-p.exited:
			t.Fatalf("%s exited before %s answered: %v", filepath.Base(p.Cmd.Path), url, p.err)
		default:
		}
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})
}

// Post sends a KeyedPost to p.Addr.
func (p *Proc) Post(t testing.TB, target, key, body string, header ...string) Response {
	t.Helper()
	return Send(t, p.Addr, KeyedPost(target, key, body, header...))
}

// Send sends q to p.Addr.
func (p *Proc) Send(t testing.TB, q Request) Response {
	t.Helper()
	return Send(t, p.Addr, q)
}

// Signal sends sig to the process.
func (p *Proc) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// Exit waits up to d for the process to exit and returns how it did; it fails
// the test if the process still runs then.
func (p *Proc) Exit(t testing.TB, d time.Duration) error {
	t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(d):
		t.Fatalf("%s did not exit within %v", filepath.Base(p.Cmd.Path), d)
		return nil
	}
}

// Stop sends SIGTERM and fails the test unless the process exits cleanly
// within 15 s.
func (p *Proc) Stop(t testing.TB) {
	t.Helper()
	p.Signal(t, syscall.SIGTERM)
	if err := p.Exit(t, 15*time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}

// Kill kills the process and waits for it to be gone.
func (p *Proc) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.exited
}
