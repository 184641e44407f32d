// Package pgtest runs throwaway PostgreSQL servers for tests (initdb and pg_ctl on
// a free loopback port, in a temporary directory), which tests may stop, restart
// or kill. As root (CI), the server runs as the postgres user, since PostgreSQL
// refuses to run as root.
//
// When no initdb is found, tests are skipped with a message, except under
// CI=true, where they fail: CI must exercise PostgreSQL.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/procinfo"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Cluster is one PostgreSQL data directory and its server, for tests and the
// soak: Init once, then Start and Stop as often as needed.
type Cluster struct {
	Addr string // 127.0.0.1:port
	// Durable runs the server at PostgreSQL's default durability (fsync and
	// full page writes on), for benchmarks; tests leave them off.
	Durable bool
	dir     string
	bin     string     // the directory of initdb, pg_ctl, postgres
	as      *user.User // the user to run as, when we are root
}

// Server is a Cluster owned by one test.
type Server struct {
	*Cluster
	t testing.TB
}

// URL is a postgres:// URL of the server's postgres database.
func (s *Cluster) URL() string {
	return "postgres://postgres@" + s.Addr + "/postgres?sslmode=disable"
}

// Pool opens a pool on the server, closed when the test ends.
func (s *Server) Pool(opts ...func(*pgxpool.Config)) *pgxpool.Pool {
	s.t.Helper()
	cfg, err := pgxpool.ParseConfig(s.URL())
	if err != nil {
		s.t.Fatalf("pgtest: %v", err)
	}
	for _, o := range opts {
		o(cfg)
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		s.t.Fatalf("pgtest: %v", err)
	}
	s.t.Cleanup(p.Close)
	return p
}

// BinDir finds PostgreSQL's programs: on PATH, or Debian's versioned directory.
func BinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Dir(real), nil
		}
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Strings(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	return "", errors.New("initdb not found (on PATH or in /usr/lib/postgresql/*/bin); install postgresql")
}

// NewCluster initialises a data directory under dir (which it creates) and
// picks a free port; the server is not started.
func NewCluster(dir string) (*Cluster, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, dir: dir}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		if c.as, err = user.Lookup("postgres"); err != nil {
			return nil, fmt.Errorf("running as root and there is no postgres user to run PostgreSQL as: %w", err)
		}
		uid, _ := strconv.Atoi(c.as.Uid)
		gid, _ := strconv.Atoi(c.as.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	if out, err := c.run("initdb", "-D", c.data(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions"); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	return c, nil
}

// Start runs the server on a free port (the same one again after Stop).
func (c *Cluster) Start() error {
	if c.Addr != "" {
		return c.start()
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		c.Addr = procinfo.FreeAddr()
		if err = c.start(); err == nil {
			return nil
		}
	}
	return err
}

// Start runs a fresh server for this test, stopped when it ends.
func Start(t testing.TB) *Server {
	t.Helper()
	if _, err := BinDir(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pgtest: %v; CI must run the PostgreSQL tests", err)
		}
		t.Skipf("pgtest: %v", err)
	}
	dir, err := os.MkdirTemp("", "pgtest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c, err := NewCluster(dir)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if err := c.Start(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return &Server{Cluster: c, t: t}
}

func (s *Cluster) data() string { return filepath.Join(s.dir, "data") }

// run runs one of PostgreSQL's programs, as the postgres user when we are root.
func (s *Cluster) run(prog string, args ...string) ([]byte, error) {
	path := filepath.Join(s.bin, prog)
	var cmd *exec.Cmd
	if s.as != nil {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = s.dir
	return cmd.CombinedOutput()
}

func (s *Cluster) ctl(args ...string) ([]byte, error) {
	return s.run("pg_ctl", append([]string{"-D", s.data()}, args...)...)
}

// start runs the server. Unless Durable, fsync is off (the OS keeps what a
// killed server wrote), but commits are synchronous: a committed row survives
// Stop.
func (s *Cluster) start() error {
	_, port, _ := net.SplitHostPort(s.Addr)
	args := []string{"-p", port, "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + s.dir, "-c", "max_connections=200"}
	if !s.Durable {
		args = append(args, "-c", "fsync=off", "-c", "full_page_writes=off")
	}
	opts := strings.Join(args, " ")
	out, err := s.ctl("start", "-w", "-t", "30", "-l", filepath.Join(s.dir, "server.log"), "-o", opts)
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
		return fmt.Errorf("pg_ctl start on %s: %v\n%s\n%s", s.Addr, err, out, log)
	}
	return s.waitReady(30 * time.Second)
}

func (s *Cluster) waitReady(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := pgx.Connect(ctx, s.URL())
		if err == nil {
			err = c.Ping(ctx)
			c.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("PostgreSQL on %s not ready within %v: %v", s.Addr, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// PID is the server's (the postmaster's) process id, or 0 when it is not running.
func (c *Cluster) PID() int {
	b, err := os.ReadFile(filepath.Join(c.data(), "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(first))
	return pid
}

// Stop shuts the server down at once (as a crash would: no checkpoint; it
// recovers from its WAL at the next start).
func (c *Cluster) Stop() error {
	if out, err := c.ctl("stop", "-m", "immediate", "-w"); err != nil {
		return fmt.Errorf("pg_ctl stop: %v\n%s", err, out)
	}
	return nil
}

// Stop stops the test's server (see Cluster.Stop).
func (s *Server) Stop() {
	s.t.Helper()
	if err := s.Cluster.Stop(); err != nil {
		s.t.Fatalf("pgtest: %v", err)
	}
}

// Restart starts a stopped server again on the same port, keeping its data.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatalf("pgtest: restart: %v", err)
	}
}
