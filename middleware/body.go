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

// readBody reads the whole body (bounded by max_request_body and by the body
// budget, whose reservations go to res) and puts an identical one back.
//
// The read is bounded by body_read_timeout through the connection's read
// deadline. When the body was read, the deadline is lifted: what follows (the
// upstream call) is bounded by the handler timeout, and an expired read deadline
// would make net/http cancel the request. When it was not, the deadline stays:
// net/http reads what is left of the body after the handler returns (to reuse
// the connection), and that read must end at body_read_timeout too, or a client
// that stalls would hold the connection and its goroutine until it sends the
// rest (the answer itself waits behind that read).
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, res *reservation) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	var rc *http.ResponseController
	if h.s.BodyReadTimeout > 0 {
		// Writers that cannot set a deadline (httptest) are skipped.
		rc = http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(h.s.BodyReadTimeout)) != nil {
			rc = nil
		}
	}
	body, err := readAll(r.Body, r.ContentLength, h.s.MaxRequestBody, res)
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
	if strings.EqualFold(firstValue(r.Header, "Expect"), "100-continue") {
		delete(r.Header, "Expect")
	}
	// Read again from memory: by a hook (a ScopeFunc, RequestInfo) in one
	// allocation, and made the transport's in-memory body (setBufferedBody)
	// only when it is forwarded (forwardable), never for a replay.
	hb := &heldBody{body: body}
	hb.Reset(body)
	r.Body = hb
	return body, nil
}

// heldBody is a body read whole by readBody, read again from memory.
type heldBody struct {
	bytes.Reader
	body []byte
}

func (*heldBody) Close() error { return nil }

// forwardable makes a body readBody held the transport's in-memory body
// before r goes to the next handler.
func forwardable(r *http.Request) {
	if b, ok := r.Body.(*heldBody); ok {
		setBufferedBody(r, b.body) // grpcbody.go
	}
}

// bodyChunk is the largest piece a body is read in. A declared body up to this
// size is allocated at once.
const bodyChunk = 64 << 10

// firstChunk is the first piece of a body of unknown length; the pieces double
// from it up to bodyChunk.
const firstChunk = 512

// bodyLeftUnread prepares an answer written before r's body was read (body is
// nil then): net/http reads what is left of a body after the handler returns,
// to reuse the connection, and for an HTTP/1 answer it does so before sending
// it. So the connection closes after the answer (Connection: close: the answer
// goes out at once), and that read ends at body_read_timeout. HTTP/2 ends the
// stream instead.
func (h *Handler) bodyLeftUnread(w http.ResponseWriter, r *http.Request, body []byte) {
	if body != nil || r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 || r.ProtoMajor != 1 {
		return
	}
	if h.s.BodyReadTimeout > 0 {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(h.s.BodyReadTimeout))
	}
	w.Header().Set("Connection", "close")
}

// readAll reads a body of declared length (-1: unknown) of at most limit bytes.
// A declared length is reserved in res before a byte is read; an unknown one
// piece by piece, each before it is allocated. Either way memory is allocated as
// the bytes arrive, in pieces, never more than one piece ahead of them: a client
// that declares 10 MiB and stalls holds what it sent, and a body that stalls
// halfway leaves no garbage behind (a buffer that doubled as it grew would
// leave about its own size). A body of more than one piece is joined once
// complete. It returns errBodyTooLarge above limit and errOverloaded when a
// reservation does not fit.
func readAll(src io.Reader, declared, limit int64, res *reservation) ([]byte, error) {
	if declared > limit {
		return nil, errBodyTooLarge
	}
	if declared >= 0 {
		if !res.grow(declared) {
			return nil, errOverloaded
		}
		if declared <= bodyChunk {
			// net/http stops the body at its declared length.
			buf := make([]byte, declared)
			if _, err := io.ReadFull(src, buf); err != nil {
				return nil, fmt.Errorf("reading request body: %w", err)
			}
			return buf, nil
		}
	}
	var pieces [][]byte
	var total int64
	size := int64(firstChunk)
	for {
		if declared >= 0 {
			size = min(bodyChunk, declared-total)
			if size == 0 {
				break
			}
		} else {
			if total == limit {
				// One more byte tells a body of exactly limit bytes from a
				// larger one.
				var probe [1]byte
				if n, err := io.ReadFull(src, probe[:]); n > 0 {
					return nil, errBodyTooLarge
				} else if err != io.EOF {
					return nil, fmt.Errorf("reading request body: %w", err)
				}
				break
			}
			size = min(size, limit-total)
			if !res.grow(size) {
				return nil, errOverloaded
			}
		}
		piece := make([]byte, size)
		n, err := io.ReadFull(src, piece)
		total += int64(n)
		if n > 0 {
			pieces = append(pieces, piece[:n])
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			if declared >= 0 {
				return nil, fmt.Errorf("reading request body: %w", io.ErrUnexpectedEOF)
			}
			break // the end of a body of unknown length
		}
		if err != nil {
			return nil, fmt.Errorf("reading request body: %w", err)
		}
		size = min(2*size, bodyChunk)
	}
	switch len(pieces) {
	case 0:
		return []byte{}, nil
	case 1:
		return pieces[0], nil
	}
	body := make([]byte, 0, total)
	for _, p := range pieces {
		body = append(body, p...)
	}
	return body, nil
}
