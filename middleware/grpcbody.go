package middleware

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// A gRPC call's body is length-prefixed messages: a unary call (and a server
// stream, which looks the same on the way in) sends one and ends its stream, a
// client or bidirectional stream sends more, or waits for the server's answers
// before it does. The core cannot tell the kinds apart from the method, which
// only the service's .proto files describe, so it reads a gRPC call (isGRPC)
// message by message: the first (bounded as any body is), then it waits for
// what follows. The end of the stream makes the call unary, and tracked. A
// second message, or nothing within body_read_timeout (a stream that waits for
// the server), makes it a stream, which passes through untracked, the first
// message and everything after it forwarded as they came: a stream has no one
// answer to store and replay, and buffering it would break the exchange it is.
// A route with a key source that reads the body (proto:N) looks for the key in
// the first message: a call without one passes through at once, before the
// end of its stream is awaited.

// errStream is the reason a gRPC call with a key passed through untracked.
var errStream = errors.New("a streaming gRPC call (its body goes on after its first message): passed through untracked")

// grpcPrefix is the length of a gRPC message's prefix: a compressed flag and
// a 4-byte big-endian length.
const grpcPrefix = 5

// streamBody is a gRPC call's body once its first message was read: that
// message, then the rest of the body (a read begun while waiting for its end,
// if any, first).
type streamBody struct {
	first  []byte
	rest   io.Reader
	closer io.Closer
}

func (b *streamBody) Read(p []byte) (int, error) {
	if len(b.first) > 0 {
		n := copy(p, b.first)
		b.first = b.first[n:]
		return n, nil
	}
	return b.rest.Read(p)
}

func (b *streamBody) Close() error { return b.closer.Close() }

// readFirstMessage reads the first message of gRPC call r, prefix included,
// within max_request_body, the body budget (res) and body_read_timeout as
// readBody reads a body, and leaves r.Body reading the whole body again from
// its start. An empty body has no message: frame is empty, and ended is true.
func (h *Handler) readFirstMessage(w http.ResponseWriter, r *http.Request, res *reservation) (frame []byte, ended bool, err error) {
	if r.Body == nil || r.Body == http.NoBody {
		return []byte{}, true, nil
	}
	var rc *http.ResponseController
	if h.s.BodyReadTimeout > 0 {
		rc = http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(h.s.BodyReadTimeout)) != nil {
			rc = nil
		}
	}
	var prefix [grpcPrefix]byte
	n, err := io.ReadFull(r.Body, prefix[:])
	switch {
	case n == 0 && err == io.EOF:
		ended = true
		frame = []byte{}
	case err != nil:
		return nil, false, fmt.Errorf("reading request body: %w", err)
	default:
		size := int64(binary.BigEndian.Uint32(prefix[1:]))
		// One piece for a message up to 64 KiB, as readAll reads a declared
		// body: the prefix, then the message as it arrives.
		src := io.MultiReader(bytes.NewReader(prefix[:]), r.Body)
		if frame, err = readAll(src, grpcPrefix+size, h.s.MaxRequestBody, res); err != nil {
			return nil, false, err
		}
	}
	if rc != nil {
		_ = rc.SetReadDeadline(time.Time{})
	}
	if !ended {
		r.Body = &streamBody{first: frame, rest: r.Body, closer: r.Body}
	}
	return frame, ended, nil
}

// awaitEnd waits, up to body_read_timeout (0: no bound), for what follows the
// first message of gRPC call r, whose body readFirstMessage left reading from
// that message on. The end of the stream makes it unary: r's body is then the
// message alone, as readBody leaves a body. Anything else (a next message, or
// nothing within the time) makes it a stream: r's body reads on, what came
// after the message included. An error is a body that failed.
func (h *Handler) awaitEnd(r *http.Request) (unary bool, err error) {
	b, ok := r.Body.(*streamBody)
	if !ok { // readFirstMessage found the end already
		return true, nil
	}
	t := &pendingRead{src: b.rest, done: make(chan struct{})}
	go t.read()
	var timeout <-chan time.Time
	if h.s.BodyReadTimeout > 0 {
		timer := time.NewTimer(h.s.BodyReadTimeout)
		defer timer.Stop()
		timeout = timer.C
	}
	select {
	case <-t.done:
		if t.n == 0 && t.err == io.EOF {
			setBufferedBody(r, b.first)
			_ = b.closer.Close()
			return true, nil
		}
		if t.n == 0 {
			return false, fmt.Errorf("reading request body: %w", t.err)
		}
	case <-timeout:
	}
	b.rest = t
	return false, nil
}

// pendingRead is one read of a body begun in its own goroutine, then the rest
// of the body: a stream's next bytes, which may come at any time or never.
type pendingRead struct {
	src  io.Reader
	buf  [512]byte
	n    int
	err  error
	done chan struct{} // closed once n and err are set
	off  int           // bytes of buf already read on
}

func (t *pendingRead) read() {
	defer close(t.done)
	for t.n == 0 && t.err == nil {
		t.n, t.err = t.src.Read(t.buf[:])
	}
}

func (t *pendingRead) Read(p []byte) (int, error) {
	<-t.done
	if t.off < t.n {
		n := copy(p, t.buf[t.off:t.n])
		t.off += n
		return n, nil
	}
	if t.err != nil {
		return 0, t.err
	}
	return t.src.Read(p)
}

// setBufferedBody makes body, read whole into memory, r's body: in one write
// upstream, and rewound by the transport (GetBody) for a request never sent.
func setBufferedBody(r *http.Request, body []byte) {
	// An io.NopCloser around a *bytes.Reader, exactly: net/http's transport
	// recognises it as in memory and sends the request line, headers and body
	// upstream in one write, where an unknown body type costs a second write
	// (and a second wake-up of the upstream) per request.
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
}
