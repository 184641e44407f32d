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

	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Server is one PostgreSQL server.
type Server struct {
	t    testing.TB
	Addr string // 127.0.0.1:port
	dir  string
	bin  string // the directory of initdb, pg_ctl, postgres
	as   *user.User
}

// URL is a postgres:// URL of the server's postgres database.
func (s *Server) URL() string {
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

// binDir finds PostgreSQL's programs: on PATH, or Debian's versioned directory.
func binDir(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Dir(real)
		}
		return filepath.Dir(p)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Strings(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i]
		}
	}
	msg := "pgtest: initdb not found (on PATH or in /usr/lib/postgresql/*/bin); install postgresql to run this test"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + "; CI must run the PostgreSQL tests")
	}
	t.Skip(msg)
	return ""
}

// Start runs a fresh server for this test, stopped when it ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, bin: binDir(t)}
	dir, err := os.MkdirTemp("", "pgtest")
	if err != nil {
		t.Fatal(err)
	}
	s.dir = dir
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		if s.as, err = user.Lookup("postgres"); err != nil {
			t.Fatalf("pgtest: running as root and there is no postgres user to run PostgreSQL as: %v", err)
		}
		uid, _ := strconv.Atoi(s.as.Uid)
		gid, _ := strconv.Atoi(s.as.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := s.run("initdb", "-D", s.data(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions"); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	for attempt := 0; ; attempt++ {
		s.Addr = testutil.FreeAddr(t)
		err := s.start()
		if err == nil {
			break
		}
		if attempt == 4 {
			t.Fatalf("pgtest: %v", err)
		}
	}
	t.Cleanup(func() { _, _ = s.ctl("stop", "-m", "immediate") })
	return s
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// run runs one of PostgreSQL's programs, as the postgres user when we are root.
func (s *Server) run(prog string, args ...string) ([]byte, error) {
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

func (s *Server) ctl(args ...string) ([]byte, error) {
	return s.run("pg_ctl", append([]string{"-D", s.data()}, args...)...)
}

// start runs the server. fsync is off (the OS keeps what a killed server
// wrote), but commits are synchronous: a committed row survives Stop.
func (s *Server) start() error {
	_, port, _ := net.SplitHostPort(s.Addr)
	opts := strings.Join([]string{"-p", port, "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + s.dir,
		"-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=200",
		"-c", "shared_preload_libraries=pg_stat_statements"}, " ")
	if _, err := os.Stat(filepath.Join(sharedir(s.bin), "extension", "pg_stat_statements.control")); err != nil {
		opts = strings.TrimSuffix(opts, " -c shared_preload_libraries=pg_stat_statements")
	}
	out, err := s.ctl("start", "-w", "-t", "30", "-l", filepath.Join(s.dir, "server.log"), "-o", opts)
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
		return fmt.Errorf("pg_ctl start on %s: %v\n%s\n%s", s.Addr, err, out, log)
	}
	return s.waitReady(30 * time.Second)
}

// sharedir is PostgreSQL's share directory for a bin directory
// (/usr/lib/postgresql/15/bin → /usr/share/postgresql/15).
func sharedir(bin string) string {
	return filepath.Join("/usr/share/postgresql", filepath.Base(filepath.Dir(bin)))
}

func (s *Server) waitReady(d time.Duration) error {
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

// Stop shuts the server down at once (as a crash would: no checkpoint; it
// recovers from its WAL at the next start).
func (s *Server) Stop() {
	s.t.Helper()
	if out, err := s.ctl("stop", "-m", "immediate", "-w"); err != nil {
		s.t.Fatalf("pgtest: pg_ctl stop: %v\n%s", err, out)
	}
}

// Restart starts a stopped server again on the same port, keeping its data.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatalf("pgtest: restart: %v", err)
	}
}

// HasStatStatements reports whether pg_stat_statements is loaded (it is when
// the server has the extension installed), and creates the extension.
func (s *Server) HasStatStatements(ctx context.Context, pool *pgxpool.Pool) bool {
	_, err := pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
	return err == nil
}
