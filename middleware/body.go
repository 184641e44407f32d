package middleware

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

var errBodyTooLarge = errors.New("request body too large")

// exactBodyAlloc is the largest declared body allocated at once; larger ones
// grow as their bytes arrive (never past the declared length).
const exactBodyAlloc = 64 << 10

// minBodyAlloc is the first buffer of a body of unknown length.
const minBodyAlloc = 512

// readBody reads the whole body (bounded by max_request_body and by the body
// budget, whose reservations go to hold) and puts an identical one back.
//
// The read is bounded by body_read_timeout through the connection's read
// deadline. When the body was read, the deadline is lifted: what follows (the
// upstream call) is bounded by the handler timeout, and an expired read deadline
// would make net/http cancel the request. When it was not, the deadline stays:
// net/http reads what is left of the body after the handler returns (to reuse
// the connection), and that read must end at body_read_timeout too, or a client
// that stalls would hold the connection and its goroutine until it sends the
// rest (the answer itself waits behind that read).
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, hold *bodyHold) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	var rc *http.ResponseController
	if h.cfg.bodyTimeout > 0 {
		// Writers that cannot set a deadline (httptest) are skipped.
		rc = http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(h.cfg.bodyTimeout)) != nil {
			rc = nil
		}
	}
	body, err := readAll(r.Body, r.ContentLength, h.cfg.maxRequestBody, hold)
	if err != nil {
		return nil, err
	}
	if rc != nil {
		_ = rc.SetReadDeadline(time.Time{})
	}
	_ = r.Body.Close()
	// Reading the body made net/http send the client its "100 Continue": the
	// expectation is met. Forwarded as is, it would make the upstream send a second
	// one, which a reverse proxy relays to the client.
	if strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
		r.Header.Del("Expect")
	}
	// An io.NopCloser around a *bytes.Reader, exactly: net/http's transport
	// recognises it as in memory and sends the request line, headers and body
	// upstream in one write, where an unknown body type costs a second write
	// (and a second wake-up of the upstream) per request.
	r.Body = io.NopCloser(bytes.NewReader(body))
	// GetBody lets the transport retry on a dead keep-alive connection.
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return body, nil
}

// readAll reads a body of declared length (-1: unknown) of at most limit bytes.
// A declared length is reserved in hold before a byte is read; an unknown one
// as its buffer grows. It returns errBodyTooLarge above limit and errOverloaded
// when a reservation does not fit.
func readAll(src io.Reader, declared, limit int64, hold *bodyHold) ([]byte, error) {
	if declared > limit {
		return nil, errBodyTooLarge
	}
	if declared >= 0 {
		if !hold.grow(declared) {
			return nil, errOverloaded
		}
		// net/http stops the body at its declared length.
		buf := make([]byte, 0, min(declared, exactBodyAlloc))
		for int64(len(buf)) < declared {
			if len(buf) == cap(buf) {
				buf = grown(buf, min(2*int64(cap(buf)), declared))
			}
			n, err := src.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
			if err == io.EOF && int64(len(buf)) < declared {
				err = io.ErrUnexpectedEOF
			}
			if err != nil && int64(len(buf)) < declared {
				return nil, fmt.Errorf("reading request body: %w", err)
			}
		}
		return buf, nil
	}
	// Unknown length: the buffer grows (doubling) as bytes arrive, each step
	// reserved before it is allocated, never past limit; one more byte past it
	// tells a body of exactly limit bytes from a larger one.
	first := min(minBodyAlloc, limit)
	if !hold.grow(first) {
		return nil, errOverloaded
	}
	buf := make([]byte, 0, first)
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) == limit {
				var probe [1]byte
				n, err := io.ReadFull(src, probe[:])
				switch {
				case n > 0:
					return nil, errBodyTooLarge
				case err == io.EOF:
					return buf, nil
				default:
					return nil, fmt.Errorf("reading request body: %w", err)
				}
			}
			next := min(2*int64(cap(buf)), limit)
			if !hold.grow(next - int64(cap(buf))) {
				return nil, errOverloaded
			}
			buf = grown(buf, next)
		}
		n, err := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return nil, fmt.Errorf("reading request body: %w", err)
		}
	}
}

// grown returns buf's bytes in a buffer of capacity c.
func grown(buf []byte, c int64) []byte {
	nb := make([]byte, len(buf), c)
	copy(nb, buf)
	return nb
}
