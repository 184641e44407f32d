package conformance

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// target is a small idempotent API for the suite's own tests: it does what
// the draft says (a map of records behind one mutex), unless one of breaks
// is set, each a flaw seen in real implementations that one check exists to
// catch. Its route is any path; POST creates a charge with a new id, after
// ?delay= (cut at deadline, where the outcome becomes unknown).
type target struct {
	breaks
	ttl      time.Duration // 0: records never expire
	lease    time.Duration // 0: a claim lasts until its request ends
	deadline time.Duration // 0: none; else an execution that takes longer is an unknown outcome (504)
	wait     bool          // a repeat in flight waits for the first and gets its replay, instead of 409

	mu      sync.Mutex
	records map[string]*record
	n       atomic.Int64
}

// breaks are the flaws a target can have, one check each.
type breaks struct {
	dropHeader   bool // replay: a replay loses Location
	noStore      bool // everything: keys read, nothing remembered (a pass-through)
	shortLease   bool // in-flight: a claim lapses after 60ms and is not renewed
	racyClaim    bool // concurrent: look-up and claim are two steps with a gap between
	ignoreBody   bool // mismatch: the body is not in the fingerprint
	keyOptional  bool // missing-key: a request without a key runs
	anyKey       bool // invalid-key: the key is taken as sent, whatever it is
	textErrors   bool // problem-json: errors are text/plain
	unscoped     bool // credential-scope: one key for every credential
	rerunUnknown bool // unknown-outcome: a timed-out execution releases its key
	noExpiry     bool // expiry: records outlive their advertised ttl
}

type record struct {
	fingerprint string
	claimed     time.Time
	done        bool
	doneAt      time.Time
	status      int
	header      http.Header
	body        string
}

func (t *target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, _ := io.ReadAll(r.Body)
	values := r.Header.Values("Idempotency-Key")
	if len(values) == 0 {
		if t.keyOptional {
			t.answer(w, t.execute(r, string(body)))
			return
		}
		t.problem(w, http.StatusBadRequest, "Idempotency-Key is missing")
		return
	}
	key, ok := parseKey(values[0])
	if t.anyKey {
		key, ok = values[0], true
	}
	if !ok || len(values) > 1 {
		t.problem(w, http.StatusBadRequest, "Idempotency-Key is invalid")
		return
	}
	if t.noStore {
		t.answer(w, t.execute(r, string(body)))
		return
	}
	scope := r.Header.Get("Authorization")
	if t.unscoped {
		scope = ""
	}
	storeKey := scope + "\x00" + key
	fp := r.URL.RequestURI() + "\x00" + string(body)
	if t.ignoreBody {
		fp = r.URL.RequestURI()
	}
	for {
		t.mu.Lock()
		rec := t.lookup(storeKey)
		if rec == nil {
			break
		}
		seen := *rec
		t.mu.Unlock()
		switch {
		case seen.fingerprint != fp:
			t.problem(w, http.StatusUnprocessableEntity, "Idempotency-Key is already used")
		case !seen.done && t.wait:
			time.Sleep(10 * time.Millisecond)
			continue
		case !seen.done:
			t.problem(w, http.StatusConflict, "A request is outstanding for this Idempotency-Key")
		default:
			t.replay(w, &seen)
		}
		return
	}
	// t.mu is held: claim the key.
	if t.racyClaim {
		t.mu.Unlock()
		time.Sleep(30 * time.Millisecond)
		t.mu.Lock()
	}
	mine := &record{fingerprint: fp, claimed: time.Now()}
	if t.records == nil {
		t.records = map[string]*record{}
	}
	t.records[storeKey] = mine
	t.mu.Unlock()

	res := t.execute(r, string(body))
	t.mu.Lock()
	if res.status == http.StatusGatewayTimeout && t.rerunUnknown {
		if t.records[storeKey] == mine {
			delete(t.records, storeKey)
		}
	} else {
		mine.done, mine.doneAt = true, time.Now()
		mine.status, mine.header, mine.body = res.status, res.header, res.body
	}
	t.mu.Unlock()
	t.answer(w, res)
}

// lookup is the live record of a store key (t.mu held): expired records and
// lapsed claims are none.
func (t *target) lookup(storeKey string) *record {
	rec := t.records[storeKey]
	switch {
	case rec == nil:
		return nil
	case rec.done && t.ttl > 0 && !t.noExpiry && time.Since(rec.doneAt) > t.ttl:
		return nil
	case !rec.done && t.shortLease && time.Since(rec.claimed) > 60*time.Millisecond:
		return nil
	}
	return rec
}

type result struct {
	status int
	header http.Header
	body   string
}

// execute is the API: a new charge, after ?delay=, or a 504 past the deadline.
func (t *target) execute(r *http.Request, body string) result {
	delay, _ := time.ParseDuration(r.URL.Query().Get("delay"))
	if t.deadline > 0 && delay > t.deadline {
		time.Sleep(t.deadline)
		return result{status: http.StatusGatewayTimeout, header: http.Header{"Content-Type": {"application/problem+json"}},
			body: `{"title":"outcome unknown","status":504}`}
	}
	time.Sleep(delay)
	id := fmt.Sprintf("ch_%d", t.n.Add(1))
	h := http.Header{"Content-Type": {"application/json"}, "Location": {"/charges/" + id}}
	return result{status: http.StatusCreated, header: h, body: fmt.Sprintf(`{"id":%q,"request":%s}`, id, jsonString(body))}
}

func (t *target) answer(w http.ResponseWriter, res result) {
	for name, v := range res.header {
		w.Header()[name] = v
	}
	w.WriteHeader(res.status)
	io.WriteString(w, res.body)
}

func (t *target) replay(w http.ResponseWriter, rec *record) {
	h := rec.header.Clone()
	if t.dropHeader {
		h.Del("Location")
	}
	h.Set("Idempotent-Replayed", "true")
	t.answer(w, result{rec.status, h, rec.body})
}

func (t *target) problem(w http.ResponseWriter, status int, title string) {
	if t.textErrors {
		http.Error(w, title, status)
		return
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": title, "status": status})
}

// parseKey reads a key as idemproxy does: an sf-string, or bare visible
// ASCII, 1 to 255 characters.
func parseKey(v string) (string, bool) {
	if strings.HasPrefix(v, `"`) {
		if len(v) < 3 || !strings.HasSuffix(v, `"`) || strings.ContainsAny(v[1:len(v)-1], `"\`) {
			return "", false
		}
		v = v[1 : len(v)-1]
	}
	if v == "" || len(v) > 255 {
		return "", false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x21 || v[i] > 0x7e || v[i] == ',' {
			return "", false
		}
	}
	return v, true
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
