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

// exactBodyAlloc is the largest declared body allocated at once; larger ones grow
// as their bytes arrive.
const exactBodyAlloc = 64 << 10

// readBody reads the whole body (bounded) and puts an identical one back.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if h.cfg.bodyTimeout > 0 {
		// Bound the read, then lift the bound: what follows (the upstream call) is
		// bounded by the handler timeout, and an expired read deadline would make
		// net/http cancel the request. Writers that cannot (httptest) are skipped.
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(h.cfg.bodyTimeout)) == nil {
			defer rc.SetReadDeadline(time.Time{})
		}
	}
	limit := h.cfg.maxRequestBody
	if r.ContentLength > limit {
		return nil, errBodyTooLarge
	}
	var body []byte
	if r.ContentLength >= 0 && r.ContentLength <= exactBodyAlloc {
		// A small known length (net/http stops the body there): one exact allocation.
		body = make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			return nil, fmt.Errorf("reading request body: %w", err)
		}
	} else {
		// Unknown or large: grow as bytes arrive, so a declared Content-Length
		// reserves nothing before the client sends it.
		buf := bytes.NewBuffer(make([]byte, 0, min(max(r.ContentLength, 512), exactBodyAlloc)))
		n, err := buf.ReadFrom(io.LimitReader(r.Body, limit+1))
		if err != nil {
			return nil, fmt.Errorf("reading request body: %w", err)
		}
		if n > limit {
			return nil, errBodyTooLarge
		}
		if r.ContentLength >= 0 && n != r.ContentLength {
			return nil, fmt.Errorf("reading request body: %w", io.ErrUnexpectedEOF)
		}
		body = buf.Bytes()
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
