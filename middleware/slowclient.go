package middleware

import (
	"net/http"
	"time"
)

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
