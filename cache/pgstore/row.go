package pgstore

import (
	"fmt"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// row is a record as the table holds it.
type row struct {
	state                int16
	fingerprint          []byte
	createdAt, expiresAt time.Time
	response             []byte
	lapsed, found        bool // a claim that lapsed, held; found by this claim
	// Read by Get only (for operators).
	info       []byte
	replays    int64
	lastReplay *time.Time
}

func (r *row) record() (*cache.Record, error) {
	if r.lapsed && cache.State(r.state) == cache.StateInFlight {
		rec := cache.LapsedRecord(string(r.fingerprint), r.createdAt, r.expiresAt, traceOf(r.response), string(r.info), r.found)
		r.counts(rec)
		return rec, nil
	}
	rec := &cache.Record{Version: cache.FormatVersion, State: cache.State(r.state), Fingerprint: string(r.fingerprint),
		CreatedAt: r.createdAt, ExpiresAt: r.expiresAt}
	switch rec.State {
	case cache.StateInFlight:
		if len(r.response) > 0 {
			rec.Trace = r.response // in flight, the column holds the claim's trace context
		}
		rec.Info = string(r.info)
	case cache.StateCompleted:
		resp, err := cache.DecodeResponse(r.response)
		if err != nil {
			return nil, err
		}
		rec.Response = resp
	default:
		return nil, fmt.Errorf("%w: state %d", cache.ErrCorrupt, r.state)
	}
	r.counts(rec)
	return rec, nil
}

// counts sets rec's replay count.
func (r *row) counts(rec *cache.Record) {
	if r.replays > 0 && r.lastReplay != nil {
		rec.Replays, rec.LastReplay = r.replays, *r.lastReplay
	}
}

// infoArg is a claim's info as a statement argument: NULL when it has none.
func infoArg(info string) any {
	if info == "" {
		return nil
	}
	return []byte(info)
}

func traceOf(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// traceArg is a claim's trace context as a statement argument: NULL when it has none.
func traceArg(t []byte) any {
	if len(t) == 0 {
		return nil
	}
	return t
}
