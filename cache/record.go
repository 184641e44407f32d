package cache

import (
	"bytes"
	"fmt"
	"net/http"
	"sync"
	"time"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// FormatVersion is the version of the encoded record written by this package.
// Decode rejects any other version with ErrCorrupt rather than guessing.
const FormatVersion = 1

// State is where a record is in its life.
type State uint8

// Record states.
const (
	StateInFlight  State = 1 // claimed; the first request is still running
	StateCompleted State = 2 // the first request finished; Response holds its outcome
)

func (s State) String() string {
	switch s {
	case StateInFlight:
		return "in_flight"
	case StateCompleted:
		return "completed"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Record is one idempotency record. Records returned by a store are the caller's
// own copy: the store keeps no reference to them.
type Record struct {
	Version     uint8     `msgpack:"v"`
	State       State     `msgpack:"s"`
	Fingerprint string    `msgpack:"f"`
	CreatedAt   time.Time `msgpack:"c"`
	// ExpiresAt is when the claim (in flight) or the record (completed) lapses.
	// Stores fill it in on read; it is informational.
	ExpiresAt time.Time `msgpack:"e,omitempty"`
	// Response is set on completed records.
	Response *Response `msgpack:"r,omitempty"`
	// Trace is an in-flight record's Claim.Trace (a completed record's is in
	// Response.Trace).
	Trace []byte `msgpack:"x,omitempty"`
	// Info is an in-flight record's Claim.Info, encoded (a completed
	// record's is in Response.Info; InfoOf reads either).
	Info string `msgpack:"-"`
	// Replays is how many retries were answered from the record, and
	// LastReplay when the latest was, as the store counted them
	// (ReplayCounter): filled by Get and List, for operators; a claim's
	// answer may leave them zero.
	Replays    int64     `msgpack:"-"`
	LastReplay time.Time `msgpack:"-"`
	// Lapsed marks a claim that lapsed, held as an unknown outcome for
	// its Claim.Hold (see LapsedRecord). Stores set it on read; it is not stored.
	Lapsed bool `msgpack:"-"`
	// Found is set by the ClaimOrGet that first found a lapsed claim with the
	// lock's fingerprint (or a re-sent call of its token): that caller reports
	// the hold. Not stored.
	Found bool `msgpack:"-"`
}

// LapsedStatus is the status of a held unknown outcome whose claim lapsed:
// the gateway got no answer in time.
const LapsedStatus = http.StatusGatewayTimeout

// LapsedRecord is how a store returns an in-flight claim that lapsed and
// which is held (Claim.Hold): a completed record holding an unknown outcome
// (status LapsedStatus, no rendered answer), with the claim's fingerprint,
// creation time, trace context and info (Claim.Info, to which it adds the
// hold: an EventHeld ByLapse), expiring when the hold ends.
func LapsedRecord(fingerprint string, created, holdEnd time.Time, trace []byte, info string, found bool) *Record {
	return &Record{
		Version:     FormatVersion,
		State:       StateCompleted,
		Fingerprint: fingerprint,
		CreatedAt:   created,
		ExpiresAt:   holdEnd,
		Response:    &Response{Status: LapsedStatus, Unknown: true, Trace: trace, Info: WithEvent(info, Event{Kind: EventHeld, By: ByLapse})},
		Lapsed:      true,
		Found:       found,
	}
}

// Response is the stored outcome of the first request.
type Response struct {
	Status int         `msgpack:"s"`
	Header http.Header `msgpack:"h,omitempty"`
	Body   []byte      `msgpack:"b,omitempty"`
	// Oversize is set when the body exceeded the configured limit: the operation is
	// remembered as done but cannot be replayed (Header and Body are empty).
	Oversize bool `msgpack:"o,omitempty"`
	// BodySize is the length of the original body, also when Oversize.
	BodySize int64 `msgpack:"n,omitempty"`
	// Trailer holds the response's trailers, sent after the body on replay.
	Trailer http.Header `msgpack:"t,omitempty"`
	// Unknown marks a held unknown outcome: the first execution was sent and no
	// complete answer came back; the stored response is the outcome-unknown
	// problem its retries get.
	Unknown bool `msgpack:"u,omitempty"`
	// Trace is the first execution's trace context (see Claim.Trace).
	Trace []byte `msgpack:"x,omitempty"`
	// Info is the record's request and history (Claim.Info, with the events
	// that held and settled it), encoded by EncodeInfo; nothing replays it.
	// Records of earlier versions have none.
	Info string `msgpack:"i,omitempty"`
}

// EncodeResponse and DecodeResponse encode only the response, for stores that keep
// the other fields apart (the Redis store keeps them as hash fields).
func EncodeResponse(resp *Response) ([]byte, error) {
	b, err := msgpack.Marshal(resp)
	if err != nil {
		return nil, fmt.Errorf("encoding response: %w", err)
	}
	return b, nil
}

// WriteResponse appends the encoding of resp (as EncodeResponse makes it) to buf,
// through a pooled encoder: for stores that copy the bytes into memory of their own.
func WriteResponse(buf *bytes.Buffer, resp *Response) error {
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(buf)
	if err := resp.EncodeMsgpack(enc); err != nil {
		return fmt.Errorf("encoding response: %w", err)
	}
	return nil
}

// DecodeResponse is the inverse of EncodeResponse; bad input wraps ErrCorrupt.
// The result shares no memory with b.
func DecodeResponse(b []byte) (*Response, error) {
	return decodeResponseFrom(b, "")
}

// DecodeResponseString is DecodeResponse of s, a reply a store client
// already made a string of (Redis): the header names and values are cut from
// s itself instead of a copy of it.
func DecodeResponseString(s string) (*Response, error) {
	return decodeResponseFrom(unsafe.Slice(unsafe.StringData(s), len(s)), s)
}

// DecodeResponseStringInto is DecodeResponseString into dst, which must be
// the zero Response: for a store that allocates a replayed response together
// with its record (the memory store). On an error dst holds anything.
func DecodeResponseStringInto(dst *Response, s string) error {
	return decodeResponseInto(dst, unsafe.Slice(unsafe.StringData(s), len(s)), s)
}

// decodeResponseFrom decodes b; s, when not empty, is b as a string (b is
// then read only, never written nor kept).
func decodeResponseFrom(b []byte, s string) (*Response, error) {
	resp := new(Response)
	if err := decodeResponseInto(resp, b, s); err != nil {
		return nil, err
	}
	return resp, nil
}

// decodeResponseInto is decodeResponseFrom into the zero Response resp.
func decodeResponseInto(resp *Response, b []byte, s string) error {
	if !decodeResponseFastInto(resp, b, s) { // not the canonical shape: the library decides
		if s != "" {
			b = []byte(s) // the library may keep what it is given
		}
		*resp = Response{}
		if err := decodeResponse(b, resp); err != nil {
			return fmt.Errorf("%w: response: %v", ErrCorrupt, err)
		}
	}
	if resp.Status < 100 || resp.Status > 999 {
		return fmt.Errorf("%w: response status %d", ErrCorrupt, resp.Status)
	}
	return nil
}

// decodeResponse decodes straight into resp with a pooled decoder, sparing
// msgpack.Unmarshal's reflection and allocations on the replay path.
func decodeResponse(b []byte, resp *Response) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed msgpack: %v", p)
		}
	}()
	d := responseDecoders.Get().(*responseDecoder)
	defer func() {
		d.r.Reset(nil)
		responseDecoders.Put(d)
	}()
	d.r.Reset(b)
	d.dec.Reset(&d.r)
	return resp.DecodeMsgpack(d.dec)
}

type responseDecoder struct {
	r   bytes.Reader
	dec *msgpack.Decoder
}

var responseDecoders = sync.Pool{New: func() any { return &responseDecoder{dec: msgpack.NewDecoder(nil)} }}
