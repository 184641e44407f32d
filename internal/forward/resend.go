package forward

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"

	"github.com/idemproxy/idemproxy/middleware"
)

// ErrResendRefused is what a guarded request's GetBody answers once its headers
// were written upstream.
var ErrResendRefused = errors.New("not re-sent: the request was already written to the upstream, which may have acted on it")

// Attempt is one first execution's trip upstream, seen from the transport: it
// knows whether any of the request was written, which is what decides how a
// failure is classified. The proxy and the Caddy module both go through it, so
// "not sent" and "outcome unknown" mean the same in both.
type Attempt struct {
	wrote atomic.Bool
}

// Guard returns out (the request about to go upstream) watched by a, and so that
// Go's transport can never send it twice. The transport treats a request with an
// Idempotency-Key header as replayable, and after a reset or EOF on a reused
// keep-alive connection it sends it again on a new one, although the upstream
// already read it (and may have acted): a double run below the idempotency
// layer. A re-send rewinds the body through GetBody, so GetBody refuses once the
// headers were written; a request that never left (nothing written) may still
// be sent again. An empty body gets an empty in-memory reader, so the transport
// asks GetBody for it too (it re-sends a NoBody request without asking).
// getBody is the body's rewind (nil when there is no body).
func (a *Attempt) Guard(out *http.Request, getBody func() (io.ReadCloser, error)) *http.Request {
	if getBody == nil {
		getBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(nil)), nil }
	}
	ctx := httptrace.WithClientTrace(out.Context(), &httptrace.ClientTrace{WroteHeaders: func() { a.wrote.Store(true) }})
	out = out.WithContext(ctx)
	if out.ContentLength == 0 {
		out.Body = io.NopCloser(bytes.NewReader(nil))
	}
	out.GetBody = func() (io.ReadCloser, error) {
		if a.wrote.Load() {
			return nil, ErrResendRefused
		}
		return getBody()
	}
	return out
}

// Wrote reports whether the request's headers were written upstream.
func (a *Attempt) Wrote() bool { return a.wrote.Load() }

// Classify tells the core how a failed upstream call ended (err is the
// transport's, or the handler's wrapping it). Before the request's headers were
// written (a dial error, a refused connection, a failed TLS handshake, a dial
// timeout), it never reached the upstream: middleware.ErrNotSent, and the key is
// released. Once they were, the upstream may have read it and acted, whatever
// came next (a reset, an EOF, a timeout, a TLS alert, a body cut mid-stream):
// middleware.ErrOutcomeUnknown. The transport's write is what decides, never the
// error's type, which cannot tell a handshake alert from one after the request.
func (a *Attempt) Classify(err error) error {
	switch {
	case err == nil:
		return nil
	case a.wrote.Load():
		return middleware.MarkOutcomeUnknown(err)
	default:
		return middleware.MarkNotSent(err)
	}
}
