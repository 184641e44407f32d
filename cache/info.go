package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
)

// Info is what a record knows of its first request and of what settled it,
// for operators: the admin APIs show it, nothing on a request's path reads
// it. It holds no header value and no body (the request id and the client
// address are the only values taken from the request besides its method and
// canonical path), and it is bounded: EncodeInfo cuts each string to its
// bound and keeps at most MaxEvents events, so an encoded Info never exceeds
// MaxInfo bytes.
//
// Stores keep it encoded and opaque (Claim.Info, Record.Info, Response.Info),
// as they keep the trace context.
type Info struct {
	Method    string    `msgpack:"m,omitempty"`
	Path      string    `msgpack:"p,omitempty"` // the canonical path, without the query (which may carry a key)
	Route     string    `msgpack:"r,omitempty"` // the configured path of the route that tracked it
	RequestID string    `msgpack:"i,omitempty"` // the first request's id (X-Request-Id, as the packaging set or forwarded it)
	Client    string    `msgpack:"c,omitempty"` // the client's address, as the packaging knows it
	FirstSeen time.Time `msgpack:"f,omitempty"` // when the first request claimed the key
	Events    []Event   `msgpack:"e,omitempty"` // what held and settled it, oldest first
}

// Event is one step of a record's history: how it came to be held, and who
// settled it.
type Event struct {
	Kind EventKind `msgpack:"k"`
	By   string    `msgpack:"b,omitempty"` // one of the By… names
	// At is when it happened; zero for a hold by lapse, whose start the store
	// knows only as the hold's end less unknown_hold.
	At time.Time `msgpack:"a,omitempty"`
}

// EventKind is what an Event did.
type EventKind string

// Event kinds.
const (
	// EventHeld: the first execution's outcome became unknown, and the key
	// was held (By ByNoAnswer or ByLapse).
	EventHeld EventKind = "held"
	// EventResolved: a held key was given its answer (By ByOperator,
	// ByReconcile, or ByLateCompletion: the first execution's own answer,
	// stored after its claim lapsed).
	EventResolved EventKind = "resolved"
	// EventReleased: a held key was released, so the next retry runs (By
	// ByOperator or ByReconcile). A release deletes the record: the event is
	// in the record its release answers with, and in the log.
	EventReleased EventKind = "released"
)

// Who an Event's By names.
const (
	ByNoAnswer       = "no_answer"       // sent upstream, no complete answer came back
	ByLapse          = "lease_lapsed"    // the claim lapsed before an answer was stored
	ByOperator       = "operator"        // an admin API (idemproxy keys, Caddy's admin API)
	ByReconcile      = "reconcile"       // the route's reconcile asked the upstream
	ByLateCompletion = "late_completion" // the first execution's answer, stored after its claim lapsed
)

// Bounds of an Info.
const (
	MaxInfoPath   = 256 // bytes of Path (a longer path is cut, "…" at its end)
	MaxInfoString = 128 // bytes of Method, Route, RequestID and Client
	MaxEvents     = 8   // events kept: the first, and the latest others
	// MaxInfo bounds an encoded Info.
	MaxInfo = 2048
)

// EncodeInfo encodes info within its bounds (see Info), for Claim.Info and
// Response.Info; "" for a nil info. It runs at every claim, a replay's
// included, so it writes the msgpack map the struct tags describe by hand,
// through a pooled encoder: one allocation, the string.
func EncodeInfo(info *Info) string {
	if info == nil {
		return ""
	}
	b := info.bounded()
	buf := infoBufs.Get().(*bytes.Buffer)
	defer infoBufs.Put(buf)
	buf.Reset()
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(buf)
	if err := b.encode(enc); err != nil || buf.Len() > MaxInfo { // neither can happen to a bounded Info
		return ""
	}
	return buf.String()
}

var infoBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// encode writes i as msgpack: a map of its non-empty fields by their tags.
func (i *Info) encode(enc *msgpack.Encoder) error {
	strs := [...]struct{ k, v string }{{"m", i.Method}, {"p", i.Path}, {"r", i.Route}, {"i", i.RequestID}, {"c", i.Client}}
	n := 0
	for _, f := range strs {
		if f.v != "" {
			n++
		}
	}
	if !i.FirstSeen.IsZero() {
		n++
	}
	if len(i.Events) > 0 {
		n++
	}
	if err := enc.EncodeMapLen(n); err != nil {
		return err
	}
	for _, f := range strs {
		if f.v == "" {
			continue
		}
		if err := errors.Join(enc.EncodeString(f.k), enc.EncodeString(f.v)); err != nil {
			return err
		}
	}
	if !i.FirstSeen.IsZero() {
		if err := errors.Join(enc.EncodeString("f"), enc.EncodeTime(i.FirstSeen)); err != nil {
			return err
		}
	}
	if len(i.Events) == 0 {
		return nil
	}
	if err := errors.Join(enc.EncodeString("e"), enc.EncodeArrayLen(len(i.Events))); err != nil {
		return err
	}
	for _, ev := range i.Events {
		m := 1
		if ev.By != "" {
			m++
		}
		if !ev.At.IsZero() {
			m++
		}
		if err := errors.Join(enc.EncodeMapLen(m), enc.EncodeString("k"), enc.EncodeString(string(ev.Kind))); err != nil {
			return err
		}
		if ev.By != "" {
			if err := errors.Join(enc.EncodeString("b"), enc.EncodeString(ev.By)); err != nil {
				return err
			}
		}
		if !ev.At.IsZero() {
			if err := errors.Join(enc.EncodeString("a"), enc.EncodeTime(ev.At.UTC())); err != nil {
				return err
			}
		}
	}
	return nil
}

// DecodeInfo decodes what EncodeInfo wrote: nil for "", ErrCorrupt for
// anything else it cannot read. Fields it does not know (a later version's)
// are skipped.
func DecodeInfo(s string) (*Info, error) {
	if s == "" {
		return nil, nil
	}
	if len(s) > 4*MaxInfo {
		return nil, fmt.Errorf("%w: info of %d bytes", ErrCorrupt, len(s))
	}
	info := new(Info)
	if err := msgpack.Unmarshal([]byte(s), info); err != nil {
		return nil, fmt.Errorf("%w: info: %v", ErrCorrupt, err)
	}
	return info, nil
}

// WithEvent is info (as EncodeInfo wrote it) with ev added: the stored
// history of a record that ev settles. A record without an Info gets one
// holding only ev; an Info that does not decode is replaced so.
func WithEvent(info string, ev Event) string {
	i, err := DecodeInfo(info)
	if err != nil || i == nil {
		i = new(Info)
	}
	i.Events = append(i.Events, ev)
	return EncodeInfo(i)
}

// InfoOf is the Info of rec (its response's, once completed; the claim's
// while in flight): nil when it has none (a record an earlier version
// wrote).
func InfoOf(rec *Record) (*Info, error) {
	if rec == nil {
		return nil, nil
	}
	if rec.Response != nil && rec.Response.Info != "" {
		return DecodeInfo(rec.Response.Info)
	}
	return DecodeInfo(rec.Info)
}

// bounded is a copy of info within its bounds.
func (info *Info) bounded() Info {
	b := *info
	b.Events = slices.Clone(b.Events)
	b.Method = cut(b.Method, MaxInfoString)
	b.Path = cut(b.Path, MaxInfoPath)
	b.Route = cut(b.Route, MaxInfoString)
	b.RequestID = cut(b.RequestID, MaxInfoString)
	b.Client = cut(b.Client, MaxInfoString)
	if len(b.Events) > MaxEvents {
		// The first (how it came to be held) and the latest.
		evs := make([]Event, 0, MaxEvents)
		evs = append(evs, b.Events[0])
		b.Events = append(evs, b.Events[len(b.Events)-MaxEvents+1:]...)
	}
	for i := range b.Events {
		b.Events[i].By = cut(b.Events[i].By, 32)
		b.Events[i].Kind = EventKind(cut(string(b.Events[i].Kind), 16))
	}
	if !b.FirstSeen.IsZero() {
		b.FirstSeen = b.FirstSeen.UTC()
	}
	return b
}

// cut is s within max bytes, cut at a UTF-8 boundary with "…" (3 bytes)
// at its end when it was longer.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max - len("…")
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Settle resolves (resp set) or releases (resp nil) the held unknown outcome
// under key, as Store.Resolve does, with its history: the record's Info
// (read first) gains an EventResolved or EventReleased by by, kept in resp.
// It returns that Info, which for a release is the record's last (the
// record is gone). The read and the resolve are two calls: a record that
// replaced the held one between them is refused by Resolve, which checks
// and writes in one step, so the history never settles another record.
func Settle(ctx context.Context, store Store, key string, resp *Response, ttl time.Duration, by string, at time.Time) (*Info, error) {
	rec, err := store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if !IsHeld(rec) {
		return nil, ErrNotUnknown
	}
	ev := Event{Kind: EventReleased, By: by, At: at}
	if resp != nil {
		ev.Kind = EventResolved
	}
	from := rec.Info
	if rec.Response.Info != "" {
		from = rec.Response.Info
	}
	info := WithEvent(from, ev)
	if resp != nil {
		r := *resp
		r.Info = info
		resp = &r
	}
	if err := store.Resolve(ctx, key, resp, ttl); err != nil {
		return nil, err
	}
	return DecodeInfo(info)
}
