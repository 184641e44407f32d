package forward

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
)

// ErrResendRefused is what a guarded request's GetBody answers once its headers
// were written upstream.
var ErrResendRefused = errors.New("not re-sent: the request was already written to the upstream, which may have acted on it")

// GuardResend returns out (the request about to go upstream) so that Go's
// transport can never send it twice. The transport treats a request with an
// Idempotency-Key header as replayable, and after a reset or EOF on a reused
// keep-alive connection it sends it again on a new one, although the upstream
// already read it (and may have acted): a double run below the idempotency
// layer. A re-send rewinds the body through GetBody, so GetBody refuses once the
// headers were written; a request that never left (nothing written) may still
// be sent again. An empty body gets an empty in-memory reader, so the transport
// asks GetBody for it too (it re-sends a NoBody request without asking).
// getBody is the body's rewind (nil when there is no body).
func GuardResend(out *http.Request, getBody func() (io.ReadCloser, error)) *http.Request {
	var wrote atomic.Bool
	if getBody == nil {
		getBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(nil)), nil }
	}
	ctx := httptrace.WithClientTrace(out.Context(), &httptrace.ClientTrace{WroteHeaders: func() { wrote.Store(true) }})
	out = out.WithContext(ctx)
	if out.ContentLength == 0 {
		out.Body = io.NopCloser(bytes.NewReader(nil))
	}
	out.GetBody = func() (io.ReadCloser, error) {
		if wrote.Load() {
			return nil, ErrResendRefused
		}
		return getBody()
	}
	return out
}
