// Package redistest runs throwaway redis-server processes on free loopback ports for
// tests: one node, or a Cluster. Tests get real Redis over TCP, which they may stop
// and restart.
//
// When IDEMPROXY_REDIS_URL is set, Start uses that server instead (and Stop/Restart
// are unavailable). When no redis-server binary is found, tests are skipped with a
// message, except under CI=true, where they fail: CI must exercise Redis.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/redis/go-redis/v9"
)

// Server is one redis-server.
type Server struct {
	t    testing.TB
	Addr string // host:port
	dir  string
	cmd  *exec.Cmd
	// External is true when the server came from IDEMPROXY_REDIS_URL.
	External bool
	url      string
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return s.url }

// Client returns a new client, closed when the test ends.
func (s *Server) Client() *redis.Client {
	o, err := redis.ParseURL(s.url)
	if err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
	c := redis.NewClient(o)
	s.t.Cleanup(func() { c.Close() })
	return c
}

// binary returns the path of a Redis program, or skips/fails the test.
func binary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redistest: %s not found on PATH; CI must run the Redis tests (install redis-server and redis-tools)", name)
		}
		t.Skipf("redistest: %s not found on PATH; install redis-server (and redis-tools) to run this test", name)
	}
	return p
}

// Start runs a fresh single-node server, or uses IDEMPROXY_REDIS_URL.
func Start(t testing.TB) *Server {
	t.Helper()
	if u := os.Getenv("IDEMPROXY_REDIS_URL"); u != "" {
		o, err := redis.ParseURL(u)
		if err != nil {
			t.Fatalf("redistest: IDEMPROXY_REDIS_URL: %v", err)
		}
		s := &Server{t: t, Addr: o.Addr, url: u, External: true}
		waitPing(t, s.url)
		return s
	}
	return startFresh(t)
}

// startFresh runs a new redis-server on a free port, with extra arguments.
func startFresh(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin := binary(t, "redis-server")
	s := &Server{t: t, dir: t.TempDir()}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		s.Addr = freeAddr(t)
		s.url = "redis://" + s.Addr
		if lastErr = s.start(bin, extra...); lastErr == nil {
			t.Cleanup(s.kill)
			return s
		}
	}
	t.Fatalf("redistest: could not start redis-server %v: %v", extra, lastErr)
	return nil
}

func (s *Server) args() []string {
	_, port, _ := net.SplitHostPort(s.Addr)
	return []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--protected-mode", "no", "--daemonize", "no", "--loglevel", "warning"}
}

func (s *Server) start(bin string, extra ...string) error {
	cmd := exec.Command(bin, append(s.args(), extra...)...)
	logf, err := os.Create(filepath.Join(s.dir, "redis-"+strconv.Itoa(int(time.Now().UnixNano()))+".log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); logf.Close() }()
	s.cmd = cmd
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			b, _ := os.ReadFile(logf.Name())
			return fmt.Errorf("redis-server exited: %v: %s", err, strings.TrimSpace(string(b)))
		default:
		}
		if ping(s.url) == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	return fmt.Errorf("redis-server on %s did not answer PING within 5s", s.Addr)
}

func (s *Server) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		// Wait until the port is free so a restart can bind it.
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) && ping(s.url) == nil {
			time.Sleep(5 * time.Millisecond)
		}
		s.cmd = nil
	}
}

// Stop kills the server (as a crash would); its data is gone.
func (s *Server) Stop() {
	s.t.Helper()
	if s.External {
		s.t.Fatal("redistest: cannot stop an external server (unset IDEMPROXY_REDIS_URL)")
	}
	s.kill()
}

// Restart starts the server again on the same address, empty.
func (s *Server) Restart() {
	s.t.Helper()
	if s.External {
		s.t.Fatal("redistest: cannot restart an external server (unset IDEMPROXY_REDIS_URL)")
	}
	if err := s.start(binary(s.t, "redis-server")); err != nil {
		s.t.Fatalf("redistest: restart: %v", err)
	}
}

// Cluster is a Redis Cluster of primaries on loopback.
type Cluster struct {
	Nodes []*Server
}

// Addrs lists the nodes' addresses.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		a[i] = n.Addr
	}
	return a
}

// URL is a redis+cluster:// URL naming every node.
func (c *Cluster) URL() string {
	a := c.Addrs()
	u := "redis+cluster://" + a[0]
	for i, x := range a[1:] {
		if i == 0 {
			u += "?addr=" + x
		} else {
			u += "&addr=" + x
		}
	}
	return u
}

// StartCluster runs n cluster-enabled servers joined with redis-cli --cluster create.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	bin := binary(t, "redis-server")
	cli := binary(t, "redis-cli")
	c := &Cluster{}
	for i := 0; i < n; i++ {
		s := &Server{t: t, dir: t.TempDir()}
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			s.Addr = freeAddr(t)
			s.url = "redis://" + s.Addr
			if err = s.start(bin, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(s.dir, "nodes.conf"),
				"--cluster-node-timeout", "2000"); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("redistest: cluster node %d: %v", i, err)
		}
		t.Cleanup(s.kill)
		c.Nodes = append(c.Nodes, s)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, node := range c.Nodes {
		for {
			info, err := clusterInfo(node.url)
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster did not reach cluster_state:ok: %v %s", err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

func clusterInfo(url string) (string, error) {
	o, _ := redis.ParseURL(url)
	c := redis.NewClient(o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.ClusterInfo(ctx).Result()
}

func freeAddr(t testing.TB) string { return testutil.FreeAddr(t) }

func ping(url string) error {
	o, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	o.MaxRetries = -1
	o.DialTimeout = 200 * time.Millisecond
	c := redis.NewClient(o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	return c.Ping(ctx).Err()
}

func waitPing(t testing.TB, url string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := ping(url)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if os.Getenv("CI") == "true" {
				t.Fatalf("redistest: Redis at IDEMPROXY_REDIS_URL unreachable: %v", err)
			}
			t.Skipf("redistest: Redis at IDEMPROXY_REDIS_URL unreachable: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StartSentinel runs a Sentinel monitoring master under the name "mymaster".
func StartSentinel(t testing.TB, master *Server) *Server {
	t.Helper()
	return StartSentinels(t, master.Addr, 1, 1, 5*time.Second)[0]
}

// StartSentinels runs n Sentinels monitoring the primary at masterAddr under the
// name "mymaster", with this quorum, declaring it down after downAfter.
func StartSentinels(t testing.TB, masterAddr string, n, quorum int, downAfter time.Duration) []*Server {
	t.Helper()
	out := make([]*Server, n)
	for i := range out {
		out[i] = startSentinel(t, masterAddr, quorum, downAfter)
	}
	return out
}

func startSentinel(t testing.TB, masterAddr string, quorum int, downAfter time.Duration) *Server {
	t.Helper()
	bin := binary(t, "redis-server")
	host, mport, _ := net.SplitHostPort(masterAddr)
	s := &Server{t: t, dir: t.TempDir()}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		s.Addr = freeAddr(t)
		s.url = "redis://" + s.Addr
		_, port, _ := net.SplitHostPort(s.Addr)
		conf := filepath.Join(s.dir, "sentinel.conf") // Sentinel rewrites its config: it must be writable
		body := fmt.Sprintf("port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster %s %s %d\n"+
			"sentinel down-after-milliseconds mymaster %d\nsentinel failover-timeout mymaster 10000\n",
			port, s.dir, host, mport, quorum, downAfter.Milliseconds())
		if err = os.WriteFile(conf, []byte(body), 0o600); err != nil {
			break
		}
		cmd := exec.Command(bin, conf, "--sentinel")
		logf, _ := os.Create(filepath.Join(s.dir, "sentinel.log"))
		cmd.Stdout, cmd.Stderr = logf, logf
		if err = cmd.Start(); err != nil {
			break
		}
		s.cmd = cmd
		go func() { _ = cmd.Wait(); logf.Close() }()
		deadline := time.Now().Add(5 * time.Second)
		for err = ping(s.url); err != nil && time.Now().Before(deadline); err = ping(s.url) {
			time.Sleep(20 * time.Millisecond)
		}
		if err == nil {
			t.Cleanup(s.kill)
			return s
		}
		_ = cmd.Process.Kill()
	}
	t.Fatalf("redistest: could not start redis-server --sentinel: %v", err)
	return nil
}

// StartReplica runs a fresh server replicating from the primary at masterAddr
// (which may be a fault proxy in front of it), and waits until the link is up.
func StartReplica(t testing.TB, masterAddr string) *Server {
	t.Helper()
	host, port, _ := net.SplitHostPort(masterAddr)
	s := startFresh(t, "--replicaof", host, port)
	c := s.Client()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		info, _ := c.Info(context.Background(), "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			return s
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("redistest: the replica on %s did not link to %s within 10s", s.Addr, masterAddr)
	return nil
}
