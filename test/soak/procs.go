package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// managed is a child process that can be killed, stopped and restarted on the same
// address.
type managed struct {
	name string
	argv []string
	addr string // what to probe for readiness
	dir  string
	// redis: ready means PING answers PONG (a restarted Redis accepts connections
	// while still loading its data, answering LOADING errors).
	redis bool

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	runs int
}

func (m *managed) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.runs++
	logf, err := os.Create(filepath.Join(m.dir, fmt.Sprintf("%s.%d.log", m.name, m.runs)))
	if err != nil {
		return err
	}
	cmd := exec.Command(m.argv[0], m.argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", m.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	m.cmd, m.done = cmd, done
	// A restarted Redis loads its append-only file first (it grows through a long
	// run: tens of seconds by the end of 30 minutes on a busy machine).
	deadline := time.Now().Add(15 * time.Second)
	if m.redis {
		deadline = time.Now().Add(90 * time.Second)
	}
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", m.addr, 200*time.Millisecond); err == nil {
			ready := !m.redis || pong(c)
			c.Close()
			if ready {
				return nil
			}
		}
		select {
		case <-done:
			b, _ := os.ReadFile(logf.Name())
			return fmt.Errorf("%s exited at start: %s", m.name, b)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not listen on %s", m.name, m.addr)
}

// signal sends sig and waits (up to timeout) for the process to exit.
func (m *managed) signal(sig syscall.Signal, timeout time.Duration) error {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("%s did not exit within %v of %v", m.name, timeout, sig)
	}
}

// notify sends sig to the running process and returns at once.
func (m *managed) notify(sig syscall.Signal) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return fmt.Errorf("%s is not running", m.name)
	}
	return m.cmd.Process.Signal(sig)
}

func (m *managed) kill() { _ = m.signal(syscall.SIGKILL, 5*time.Second) }

// listenAddr is a loopback address for a child process to listen on, kept for
// its restarts. Its port is below Linux's ephemeral range (32768 and up), where
// the soak's own many outgoing connections take their local ports: a port
// picked there can be taken by one before the child binds it, or between its
// SIGKILL and its restart. It is free when picked, and never handed out twice.
func listenAddr() string {
	usedPorts.mu.Lock()
	defer usedPorts.mu.Unlock()
	for {
		p := 10000 + rand.IntN(22000)
		if usedPorts.m[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		usedPorts.m[p] = true
		return l.Addr().String()
	}
}

var usedPorts = struct {
	mu sync.Mutex
	m  map[int]bool
}{m: map[int]bool{}}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// newRedis is a redis-server with an append-only file and fsync on every write: a
// shutdown and restart keeps every completed record, so any record lost during the
// soak is the proxy's fault. extra arguments follow (--replicaof, …).
func newRedis(dir, name string, extra ...string) (*managed, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not on PATH (apt-get install redis-server)")
	}
	addr := listenAddr()
	rdir := filepath.Join(dir, name)
	if err := os.MkdirAll(rdir, 0o755); err != nil {
		return nil, err
	}
	argv := append([]string{bin, "--port", port(addr), "--bind", "127.0.0.1",
		"--dir", rdir, "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--protected-mode", "no"}, extra...)
	return &managed{name: name, redis: true, dir: dir, addr: addr, argv: argv}, nil
}

// soakLease is the instances' lock_ttl.
const soakLease = 4 * time.Second

// proxyArgs are added to every idemproxy instance's arguments (-proxy-arg).
var proxyArgs []string

func newProxy(dir, bin, name, upstream, store string, extra ...string) *managed {
	addr, admin := listenAddr(), listenAddr()
	argv := append([]string{bin, "--listen", addr, "--admin", admin, "--upstream", upstream, "--store", store,
		"--lock-ttl", soakLease.String(), "--shutdown-timeout", "15s", "--log-level", "warn", "--log-format", "json"}, extra...)
	argv = append(argv, proxyArgs...)
	return &managed{name: name, dir: dir, addr: addr, argv: argv}
}

func metric(adminAddr, name string) (int64, error) {
	resp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var buf [64 << 10]byte
	n, _ := resp.Body.Read(buf[:])
	for _, line := range splitLines(string(buf[:n])) {
		if len(line) > len(name) && line[:len(name)] == name && line[len(name)] == ' ' {
			return strconv.ParseInt(line[len(name)+1:], 10, 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// pong sends PING on c and reports whether Redis answered PONG.
func pong(c net.Conn) bool {
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	buf := make([]byte, 64)
	n, _ := c.Read(buf)
	return strings.HasPrefix(string(buf[:n]), "+PONG")
}

// lapsedLog is what an instance logs when a retry finds a claim that lapsed
// before its outcome was stored: the key is held from then on.
const lapsedLog = "idempotency claim lapsed before the outcome was stored"

// logged counts the lines containing each of s in the logs of every run of m.
func (m *managed) logged(s ...string) int {
	m.mu.Lock()
	runs := m.runs
	m.mu.Unlock()
	n := 0
	for run := 1; run <= runs; run++ {
		b, _ := os.ReadFile(filepath.Join(m.dir, fmt.Sprintf("%s.%d.log", m.name, run)))
	lines:
		for _, line := range strings.Split(string(b), "\n") {
			for _, want := range s {
				if !strings.Contains(line, want) {
					continue lines
				}
			}
			n++
		}
	}
	return n
}

// logged counts the lines containing s in the logs of the phase's instances.
func (h *harness) logged(s string) int { return h.loggedAll(s) }

// loggedAll counts the lines containing each of s in the logs of the phase's
// instances.
func (h *harness) loggedAll(s ...string) int {
	n := 0
	for _, p := range h.proxies {
		n += p.logged(s...)
	}
	return n
}
