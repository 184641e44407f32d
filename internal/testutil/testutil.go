// Package testutil is the one home of the helpers the project's tests share:
//
//   - free loopback ports (FreeAddr), polling for a condition (Eventually), a
//     file with the text given (TempFile);
//   - a request served in process (Req, Serve, Post, Counter, Result);
//   - a counting upstream over real sockets (Upstream, NewUpstream,
//     NewDeliveries) and one that fails the ways a real one does (RawUpstream);
//   - requests sent over real sockets with everything a client controls
//     (Request, Send, Do, KeyedPost, Delivery) and raw bytes on a connection
//     (RawExchange, RawConn, AnswerThenClose);
//   - the documents (Root, Docs, SettingsDoc): the README and the docs/
//     pages the docs tests hold to the code (SettingsDoc is generated:
//     test/settingsdoc);
//   - the process harness: a binary built once per test binary (Build, Main),
//     run to completion (Run) or started until the test ends (Start, Proc,
//     StartIdemproxy), its output logged when the test fails.
package testutil

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// FreeAddr returns a loopback address with a port free at the time of the call.
// Another process may take it before the one it is meant for binds it: a
// process that can bind 127.0.0.1:0 and say where (idemproxy's start-up line,
// StartIdemproxy) should do that instead. For an address nothing listens on,
// it is fine.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// Eventually polls cond every 2 ms until it holds, and fails the test if it does
// not within d. It is for conditions that other goroutines make true; it never
// moves a clock.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	poll(t, d, 2*time.Millisecond, what, cond)
}

func poll(t testing.TB, d, every time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(every)
	}
}

// SyncBuffer is a bytes.Buffer safe for concurrent writes: a child process's
// output, read by the test while it runs.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TempFile writes text to a file called name in a folder of its own, removed
// when the test ends, and returns the file's path.
func TempFile(t testing.TB, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
