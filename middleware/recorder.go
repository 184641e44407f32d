package middleware

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
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

// A client that stops reading an answer must not hold it, nor the goroutine
// writing it, for ever: net/http has no write deadline unless the server sets
// one for whole responses (which would cut a long first execution). So the
// core writes answers with a deadline that moves with progress: each piece
// of up to clientPiece bytes must be taken within body_read_timeout.

// clientPiece is how much of an answer the client must take within
// body_read_timeout before the deadline moves on.
const clientPiece = 64 << 10

// buffered is what net/http buffers of an answer (its bufio.Writer's size):
// an answer that fits is written after the handler returned, so it needs no
// deadline of ours (and gets none: no timer, no early flush).
const buffered = 4 << 10

// progressWriter writes to a client under a deadline that moves with
// progress. The zero timeout writes as net/http does, with no deadline.
type progressWriter struct {
	w       http.ResponseWriter
	timeout time.Duration
	set     time.Time // when the deadline was last moved; zero: none set
	off     bool      // the writer has no deadlines
	written int64     // bytes written so far
}

// write writes p in pieces, each under a deadline at most timeout away. A
// client that stalls longer gets an error here, and net/http closes its
// connection (HTTP/2: resets the stream).
func (pw *progressWriter) write(p []byte) error {
	for len(p) > 0 {
		n := min(len(p), clientPiece)
		if pw.written+int64(n) > buffered || !pw.set.IsZero() {
			pw.move()
		}
		if _, err := pw.w.Write(p[:n]); err != nil {
			return err
		}
		pw.written += int64(n)
		p = p[n:]
	}
	return nil
}

// Write is write as an io.Writer (a decoded replay is copied through it).
func (pw *progressWriter) Write(p []byte) (int, error) {
	if err := pw.write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// move sets the deadline timeout from now, unless it was moved less than a
// quarter of timeout ago (a fast client's pieces do not each reset a timer).
// It is called before what reaches the network: a write past net/http's
// buffer, a flush.
func (pw *progressWriter) move() {
	if pw.timeout <= 0 || pw.off {
		return
	}
	now := time.Now()
	if !pw.set.IsZero() && now.Sub(pw.set) < pw.timeout/4 {
		return
	}
	if http.NewResponseController(pw.w).SetWriteDeadline(now.Add(pw.timeout)) != nil {
		pw.off = true // a writer without deadlines: as before
		return
	}
	pw.set = now
}

// finish flushes what is buffered under the deadline, then clears it for the
// connection's next request (net/http does not reset a write deadline it did
// not set). It does nothing when no deadline was set.
func (pw *progressWriter) finish() {
	if pw.set.IsZero() {
		return
	}
	rc := http.NewResponseController(pw.w)
	pw.move()
	_ = rc.Flush()
	_ = rc.SetWriteDeadline(time.Time{})
	pw.set = time.Time{}
}

// writeBody writes a replayed body under a progress deadline (see
// progressWriter); the replay's stored body goes back to the budget when the
// client took it or was cut off.
func writeBody(w http.ResponseWriter, b []byte, timeout time.Duration) {
	pw := progressWriter{w: w, timeout: timeout}
	_ = pw.write(b)
	pw.finish()
}
