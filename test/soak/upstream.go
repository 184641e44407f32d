package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Upstream fault modes, switched by the schedule.
const (
	modeNormal   int32 = iota
	modeSlow           // 20% of calls take 4.5–6 s: longer than the 4 s lease, so renewal must hold it
	modeReset          // 20% of calls: the connection is reset before any effect
	modeError          // 20% of calls: 500 before any effect
	modeActReset       // 20% of calls: the effect happens, then the connection is reset
)

// effect is one execution of a logical operation: the thing that must happen at
// most once per key.
type effect struct {
	id         int64
	key        string
	bodyHash   string
	instance   string // the proxy that forwarded it: its path prefix, i0 … i2
	start, end time.Time
	// actReset: the connection was reset after the effect, so no answer reached
	// the proxy. Releasing the key (the old behaviour, unknown_outcome release)
	// runs the client's retry again: a double run per such effect.
	actReset bool
}

// lookup is one answer to GET /lookup?key=K, the reconcile request of the
// reconcile rounds: found when the upstream had executed K.
type lookup struct {
	at    time.Time
	found bool
}

type upstream struct {
	mode atomic.Int32
	// inFlight: 30% of calls take 0.3–2 s, whatever the mode: operations in
	// flight across a reload or an instance's SIGKILL.
	inFlight atomic.Bool
	// abortOnCancel: a call whose connection closes before its effect (the
	// proxy that sent it was SIGKILLed) does nothing, as an API that rolls back
	// what its caller abandoned; so a lookup that finds nothing is the truth.
	abortOnCancel atomic.Bool
	nextID        atomic.Int64
	mu            sync.Mutex
	effects       map[string][]effect
	lookups       map[string][]lookup
	calls         map[string]int // every call per key, whatever became of it
	attempts      atomic.Int64   // every call, including failed ones
	resets        atomic.Int64
	errors        atomic.Int64
	actResets     atomic.Int64
	aborted       atomic.Int64
	srv           *http.Server
	addr          string
}

func startUpstream() (*upstream, error) {
	u := &upstream{effects: map[string][]effect{}, lookups: map[string][]lookup{}, calls: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u.addr = ln.Addr().String()
	u.srv = &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = u.srv.Serve(ln) }()
	return u, nil
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/lookup") {
		u.lookup(w, r)
		return
	}
	u.attempts.Add(1)
	body, _ := io.ReadAll(r.Body)
	key := r.Header.Get("Idempotency-Key")
	u.mu.Lock()
	u.calls[key]++
	u.mu.Unlock()
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:8])
	start := time.Now()
	if u.inFlight.Load() && rand.IntN(10) < 3 {
		select {
		case <-time.After(300*time.Millisecond + time.Duration(rand.IntN(1700))*time.Millisecond):
		case <-r.Context().Done():
			if u.abortOnCancel.Load() {
				u.aborted.Add(1)
				return
			}
		}
	}
	switch u.mode.Load() {
	case modeSlow:
		if rand.IntN(5) == 0 {
			time.Sleep(4500*time.Millisecond + time.Duration(rand.IntN(1500))*time.Millisecond)
		}
	case modeReset:
		if rand.IntN(5) == 0 {
			u.resets.Add(1)
			reset(w)
			return
		}
	case modeError:
		if rand.IntN(5) == 0 {
			u.errors.Add(1)
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
	}
	time.Sleep(time.Duration(rand.IntN(15)) * time.Millisecond)
	actReset := u.mode.Load() == modeActReset && rand.IntN(5) == 0
	u.mu.Lock()
	if u.abortOnCancel.Load() && r.Context().Err() != nil {
		u.mu.Unlock()
		u.aborted.Add(1)
		return
	}
	// The effect and its id are one step under the claim a lookup takes: a lookup
	// sees an execution entirely or not at all.
	id := u.nextID.Add(1)
	u.effects[key] = append(u.effects[key], effect{id: id, key: key, bodyHash: hash,
		instance: strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 2)[0], start: start, end: time.Now(), actReset: actReset})
	u.mu.Unlock()
	if actReset {
		u.actResets.Add(1)
		reset(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"execution":%d,"key":%q,"body":%q}`, id, key, hash)
}

// lookup answers whether the upstream executed the key: 200 with its (first)
// execution's id, or 404 when it never did.
func (u *upstream) lookup(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	u.mu.Lock()
	list := u.effects[key]
	u.lookups[key] = append(u.lookups[key], lookup{at: time.Now(), found: len(list) > 0})
	u.mu.Unlock()
	if len(list) == 0 {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"execution":%d,"key":%q,"found":true}`, list[0].id, key)
}

// reset closes the request's connection with a RST, not a FIN.
func reset(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		conn.Close()
	}
}
