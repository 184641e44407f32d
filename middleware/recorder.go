package middleware

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// recorder passes a response through to the client while recording it for storage.
//
// It keeps recording when the client has gone: a write that fails is reported to
// the handler as a success, so a reverse proxy keeps reading its upstream and the
// whole response is stored for the client's retry. A client that stops reading
// is gone too once it took nothing for body_read_timeout (see progressWriter).
type recorder struct {
	w         http.ResponseWriter
	client    progressWriter  // rw.w under a progress deadline
	ignored   map[string]bool // ignore_headers, canonical
	maxBody   int64           // max_body
	status    int             // final status; 0 until written
	header    http.Header     // end-to-end headers as sent, captured at WriteHeader
	body      []byte
	size      int64
	oversize  bool
	hijacked  bool
	clientErr error
}

var (
	_ http.ResponseWriter = (*recorder)(nil)
	_ http.Flusher        = (*recorder)(nil)
	_ http.Hijacker       = (*recorder)(nil)
)

func (rw *recorder) Header() http.Header { return rw.w.Header() }

func (rw *recorder) WriteHeader(code int) {
	if rw.status != 0 || rw.hijacked {
		return // superfluous; let net/http ignore it quietly
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		rw.w.WriteHeader(code) // informational: passed on, not recorded
		return
	}
	rw.status = code
	rw.header = storableHeader(rw.w.Header(), rw.ignored)
	if cl := rw.w.Header().Get("Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n >= 0 {
			if n > rw.maxBody {
				rw.oversize = true
			} else {
				rw.body = make([]byte, 0, n)
			}
		}
	}
	rw.w.WriteHeader(code)
}

func (rw *recorder) Write(p []byte) (int, error) {
	if rw.status == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	rw.size += int64(len(p))
	if !rw.oversize {
		if rw.size > rw.maxBody {
			rw.oversize = true
			rw.body = nil
		} else {
			rw.body = append(rw.body, p...)
		}
	}
	if rw.clientErr == nil {
		rw.clientErr = rw.client.write(p)
	}
	return len(p), nil
}

// FlushError flushes to the client; http.ResponseController calls it.
func (rw *recorder) FlushError() error {
	if rw.status == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	if rw.clientErr == nil {
		rw.client.move()
		if err := http.NewResponseController(rw.w).Flush(); err != nil && err != http.ErrNotSupported {
			rw.clientErr = err
		}
	}
	return nil
}

func (rw *recorder) Flush() { _ = rw.FlushError() }

// Hijack hands the connection over. A hijacked first execution leaves no answer
// to store and may have acted: its key is held as an unknown outcome.
func (rw *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(rw.w).Hijack()
	if err == nil {
		rw.hijacked = true
	}
	return conn, brw, err
}

// switched reports whether the handler switched protocols (101) or took the
// connection over: the exchange left HTTP, and no answer can be stored.
func (rw *recorder) switched() bool {
	return rw.hijacked || rw.status == http.StatusSwitchingProtocols
}

// Unwrap lets http.ResponseController reach the client's writer for deadlines and
// full duplex.
func (rw *recorder) Unwrap() http.ResponseWriter { return rw.w }

// trailers returns the trailers the handler set: the values of the names it
// announced in a Trailer header, and headers with http.TrailerPrefix. Nil when
// there are none (the common case costs one map lookup and one scan of the keys).
func (rw *recorder) trailers() http.Header {
	h := rw.w.Header()
	var out http.Header
	add := func(name string, vals []string) {
		name = http.CanonicalHeaderKey(name)
		if name == "" || hopByHop[name] || rw.ignored[name] || len(vals) == 0 {
			return
		}
		if out == nil {
			out = http.Header{}
		}
		out[name] = append([]string(nil), vals...)
	}
	for _, v := range h["Trailer"] {
		for _, f := range strings.Split(v, ",") {
			f = strings.TrimSpace(f)
			add(f, h[http.CanonicalHeaderKey(f)])
		}
	}
	for k, vals := range h {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			add(name, vals)
		}
	}
	return out
}

// hopByHop are the connection-specific headers (RFC 9110 §7.6.1) never stored.
var hopByHop = map[string]bool{
	"Connection":          true,
	"Keep-Alive":          true,
	"Proxy-Connection":    true,
	"Proxy-Authenticate":  true,
	"Proxy-Authorization": true,
	"Te":                  true,
	"Trailer":             true,
	"Transfer-Encoding":   true,
	"Upgrade":             true,
	"Content-Length":      true, // recomputed on replay
	"Idempotent-Replayed": true, // set on replay only
}

// storableHeader copies the end-to-end headers of h, without ignored ones.
func storableHeader(h http.Header, ignored map[string]bool) http.Header {
	out := h.Clone() // one allocation for every value
	for _, v := range out["Connection"] {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				delete(out, http.CanonicalHeaderKey(f))
			}
		}
	}
	for k := range out {
		if hopByHop[k] || ignored[k] || strings.HasPrefix(k, http.TrailerPrefix) {
			delete(out, k)
		}
	}
	return out
}

// bodyAllowed reports whether a response with this status may carry a body.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}
