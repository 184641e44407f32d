package redisstore_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/redis/go-redis/v9"
)

// monitor counts, through MONITOR, the commands clients send to Redis: each
// is a round trip (a command a script runs, shown as from "lua", is not).
type monitor struct {
	t      *testing.T
	r      *bufio.Reader
	marker *redis.Client
	seq    int
}

func startMonitor(t *testing.T, srv *redistest.Server) *monitor {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	m := &monitor{t: t, r: bufio.NewReaderSize(conn, 1<<16), marker: srv.Client()}
	if line, err := m.r.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("MONITOR: %q, %v", line, err)
	}
	return m
}

// sent returns the commands clients sent since the last call, by name: it
// sends a marker on a client of its own and reads up to it, so every command
// Redis ran before the marker is counted.
func (m *monitor) sent() []string {
	m.t.Helper()
	m.seq++
	mark := fmt.Sprintf("idemproxy-mark-%d", m.seq)
	if err := m.marker.Echo(context.Background(), mark).Err(); err != nil {
		m.t.Fatal(err)
	}
	var cmds []string
	for {
		line, err := m.r.ReadString('\n')
		if err != nil {
			m.t.Fatalf("reading MONITOR: %v", err)
		}
		// +1700000000.123456 [0 127.0.0.1:50000] "evalsha" "..." ...
		open, end := strings.Index(line, "["), strings.Index(line, "]")
		if open < 0 || end < open {
			m.t.Fatalf("MONITOR line %q", line)
		}
		from := line[open+1 : end]
		name, _, _ := strings.Cut(strings.TrimSpace(line[end+1:]), " ")
		name = strings.ToLower(strings.Trim(name, `"`))
		switch {
		case strings.Contains(line, `"`+mark+`"`):
			return cmds
		case strings.Contains(from, "lua"), name == "echo" && strings.Contains(line, "idemproxy-mark-"):
		default:
			cmds = append(cmds, name)
		}
	}
}

// settle is how long each step waits before its commands are counted: the
// local cache's ping a step sets off, at most one every Window/4, is counted
// with it.
const settle = 80 * time.Millisecond

// A key's retry, counted on the wire: its first execution costs 2 round trips
// (claim, complete), its first replay on the instance that completed it none
// (the Complete kept the record in that instance's local cache), and on
// another instance 1. The caches' pings count as round trips too: at a low,
// steady rate, they add next to nothing.
func TestRetryRoundTripsOnTheWire(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External {
		t.Skip("needs a server of its own: MONITOR shows every client's commands")
	}
	instance := func() http.Handler {
		s := mustNew(t, srv.Client(), redisstore.Options{}) // the local cache at its default: on
		t.Cleanup(func() { s.Close() })
		idem, err := middleware.New(s)
		if err != nil {
			t.Fatal(err)
		}
		return idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(201)
			_, _ = w.Write([]byte("paid"))
		}))
	}
	a, b := instance(), instance()
	m := startMonitor(t, srv)
	for _, h := range []http.Handler{a, a, b} { // loads the scripts, opens the connections
		post(h, "warm-up", "x")
	}
	time.Sleep(time.Second) // the warm-up's pings are out and back
	m.sent()

	step := func(what string, h http.Handler, key string, replay bool, most int) {
		t.Helper()
		w := post(h, key, "x")
		if got := w.Header().Get("Idempotent-Replayed") == "true"; got != replay || w.Code != 201 {
			t.Fatalf("%s: %d, replayed %v", what, w.Code, got)
		}
		time.Sleep(settle)
		if cmds := m.sent(); len(cmds) != most {
			t.Errorf("%s: %d round trips to Redis %v, want %d", what, len(cmds), cmds, most)
		}
	}
	step("first execution", a, "retried", false, 2)
	step("first replay on the completing instance", a, "retried", true, 0)
	step("first replay on another instance", b, "retried", true, 1)

	// One second at a low rate (45 requests: 15 keys, each executed on A,
	// replayed on A, replayed on B): 2+0+1 round trips a key, and the pings
	// ride on the Completes.
	const keys = 15
	for i := range keys {
		key := fmt.Sprint("low-rate-", i)
		for _, h := range []http.Handler{a, a, b} {
			post(h, key, "x")
			time.Sleep(time.Second / (3 * keys))
		}
	}
	time.Sleep(settle)
	cmds := m.sent()
	// Replay counts are written apart: every cache.ReplayFlush, each
	// instance sends one pipeline (on a connection of its own, opened with
	// HELLO) of an EVAL of countScript a key it replayed. They are no
	// request's round trip; the requests' own commands are EVALSHAs.
	pings, flushed, hellos := 0, 0, 0
	for _, c := range cmds {
		switch c {
		case "publish":
			pings++
		case "eval":
			flushed++
		case "hello":
			hellos++
		}
	}
	requests := len(cmds) - pings - flushed - hellos
	t.Logf("low rate: %d requests, %d round trips, %d of them pings; %d replay counts flushed, %d connections opened", 3*keys, requests+pings, pings, flushed, hellos)
	if flushed > 2*keys || hellos > 2*2 { // at most each key on each instance; a connection an instance a flush
		t.Errorf("low rate: %d replay counts flushed over %d connections opened, want at most %d and %d", flushed, hellos, 2*keys, 4)
	}
	if requests != 3*keys || pings > 2 {
		t.Errorf("low rate: %d round trips for %d requests (%d pings), want %d and at most 2 pings: %v", requests, 3*keys, pings, 3*keys, cmds)
	}
}
