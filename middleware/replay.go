package middleware

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// answerDuplicate answers a request whose key already has a record.
func (h *Handler) answerDuplicate(w http.ResponseWriter, r *http.Request, rec *cache.Record, fp string, t *tracker) {
	t.ev.Origin = rec.Trace
	if rec.Response != nil {
		t.ev.Origin = rec.Response.Trace
	}
	switch {
	case rec.Fingerprint != fp:
		t.problem(w, OutcomeMismatch, nil, newProblem(ProblemMismatch, http.StatusUnprocessableEntity,
			h.mismatchDetail(rec.Fingerprint, fp)), 0)
	case rec.State != cache.StateCompleted || rec.Response == nil:
		t.problem(w, OutcomeConflict, nil, newProblem(ProblemInFlight, http.StatusConflict,
			"a request with this idempotency key is still being processed; retry later"), h.s.RetryAfter)
	case rec.Response.Oversize:
		p := newProblem(ProblemNotReplayable, http.StatusConflict, fmt.Sprintf(
			"the request with this idempotency key completed, but its %d-byte response was too large to store; it was not executed again",
			rec.Response.BodySize))
		p.OriginalStatus = rec.Response.Status
		t.problem(w, OutcomeNotReplayable, nil, p, 0)
	case t.grpc && rec.Response.Unknown:
		// A held outcome: the same answer for every retry, in gRPC's shape
		// (the stored one is the route's error format's).
		t.ev.Status = rec.Response.Status
		if t.ev.Outcome != OutcomeUnknown {
			t.ev.Outcome = OutcomeReplayed
		}
		t.emit()
		w.Header().Set("Idempotent-Replayed", "true")
		h.writeProblem(w, heldProblem(rec), 0, t.key, true)
	default:
		resp := h.storedAnswer(rec)
		dec, err := needsDecoding(r, resp.Status, resp.Header, resp.Body, h.s.MaxBody) // encoding.go
		if err != nil {
			ce := strings.Join(contentCodings(resp.Header), ", ")
			p := newProblem(ProblemNotAcceptable, http.StatusNotAcceptable, fmt.Sprintf(
				"the request with this idempotency key completed, and its stored response is %s-encoded, which this request's Accept-Encoding does not accept; "+
					"%v; it was not executed again: retry with Accept-Encoding: %s", ce, err, ce))
			p.OriginalStatus = resp.Status
			t.problem(w, OutcomeNotReplayable, err, p, 0)
			return
		}
		// The body is held until the client took it: it counts in the
		// budget, or a client that never reads could hold any number of them.
		if !t.reserved.grow(min(int64(len(resp.Body)), h.budget.size)) {
			t.problem(w, OutcomeOverloaded, errReplayOverloaded, newProblem(ProblemOverloaded, http.StatusServiceUnavailable,
				"the bodies held in memory reached their budget; the request was not executed, retry later with the same key"), h.s.RetryAfter)
			return
		}
		if t.ev.Outcome != OutcomeUnknown { // a lapsed lease this request found: reported so
			t.ev.Outcome = OutcomeReplayed
		}
		t.ev.Status = resp.Status
		t.emit()
		h.replayEchoing(w, resp, t.key, dec) // keyecho.go
	}
}

// replay writes a stored response, its body decoded when dec is not nil; the
// client must take each piece of the body within timeout (see progressWriter).
func replay(w http.ResponseWriter, resp *cache.Response, dec *decodedBody, timeout time.Duration) {
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	h.Del("Transfer-Encoding")
	h.Del("Content-Length")
	size := int64(len(resp.Body))
	if dec != nil {
		decodedHeader(h)
		size = dec.size
	}
	if _, ok := resp.Header["Content-Encoding"]; ok {
		varyAcceptEncoding(h) // which body a replay gets depends on it
	}
	// A gRPC answer goes as its first execution did through a reverse proxy:
	// its trailers undeclared (no Trailer header, which gRPC metadata would
	// show), and unless it is trailers-only, its headers sent before the
	// message, without a Content-Length.
	grpc := isGRPCType(resp.Header.Get("Content-Type"))
	// The two values this writes share one allocation; each is a slice of
	// its own capacity, so that appending to one never touches the other.
	vals := make([]string, 2)
	vals[0] = "true"
	h["Idempotent-Replayed"] = vals[0:1:1]
	if bodyAllowed(resp.Status) && len(resp.Trailer) == 0 && !grpc {
		vals[1] = strconv.FormatInt(size, 10) // trailers need chunked encoding
		h["Content-Length"] = vals[1:2:2]
	}
	if !grpc {
		for name := range resp.Trailer {
			h.Add("Trailer", name)
		}
	}
	w.WriteHeader(resp.Status)
	if grpc && (len(resp.Body) > 0 || len(resp.Trailer) > 0) {
		_ = http.NewResponseController(w).Flush()
	}
	switch {
	case !bodyAllowed(resp.Status) || len(resp.Body) == 0:
	case dec != nil:
		pw := progressWriter{w: w, timeout: timeout}
		_, _ = dec.copyTo(&pw, dec.size) // decoded once already: the same bytes
		pw.finish()
	default:
		writeBody(w, resp.Body, timeout)
	}
	for name, vals := range resp.Trailer {
		if grpc {
			name = http.TrailerPrefix + name
		}
		h[name] = vals // net/http sends them after the body
	}
}
