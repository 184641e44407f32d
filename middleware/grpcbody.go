package middleware

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// A gRPC call's body is length-prefixed messages: a unary call (and a server
// stream, which looks the same on the way in) sends one and ends its stream, a
// client or bidirectional stream sends more, or waits for the server's answers
// before it does. The core cannot tell the kinds apart from the method, which
// only the service's .proto files describe, so it reads a keyed gRPC call
// (isGRPC) message by message: the first (bounded as any body is), then what
// follows within grpcEndGrace (awaitEnd). The end of the stream makes the
// call unary, and tracked. Anything else on a route keyed from the message,
// and what is not a whole message with the key in metadata, is refused; a
// whole second message makes a client stream, which passes through
// untracked. Nothing within the grace forwards the call tracked, and its body
// decides as it goes on (lateBody). A route with a key source that reads the
// body (proto:N) looks for the key in the first message: a call without one
// passes through at once, before the end of its stream is awaited.

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

// grpcEndGrace is how long the core waits, after a keyed gRPC call's first
// message, for what follows it before it forwards the call. A unary call's
// end of stream comes with its message (grpc-go sets END_STREAM on the
// message's last DATA frame; other clients send it in the next frame, in the
// same write), so the wait only decides how soon a stream that waits for the
// server gets through: never whether a call is tracked. A call whose end came
// later is still tracked (lateBody): it is not a setting, as no value of it
// changes what runs once.
const grpcEndGrace = 5 * time.Millisecond

// bodyVerdict is what awaitEnd made of the body after a gRPC call's first
// message.
type bodyVerdict int

const (
	bodyUnary     bodyVerdict = iota // the message, then the end: tracked
	bodyStream                       // whole messages follow: a client stream, untracked
	bodyMalformed                    // not one message: refused
	bodyUndecided                    // nothing yet: tracked while lateBody watches
)

// errNotOneMessage is a keyed gRPC call's body that is one message and then
// something that is not the end of the stream, nor (with the key in
// metadata) whole messages.
var errNotOneMessage = errors.New("the body of a keyed gRPC call is not one message: it goes on after its first message with bytes that are not a whole message, or with a second message on a route keyed from the message")

// awaitEnd waits, up to grpcEndGrace, for what follows the first message of
// gRPC call r, whose body readFirstMessage left reading from that message on.
// The end of the stream makes it unary: r's body is then the message alone,
// as readBody leaves a body. Anything after the message on a route keyed from
// the message (inMessage) is refused: its calls are unary, and a unary
// method's server runs the first message whatever follows it. With the key
// in metadata the next message is read whole (within max_request_body and
// body_read_timeout): a body that ends inside it is refused, a whole one
// makes a client stream, whose body reads on from its first message. Nothing
// within the grace leaves the call undecided: r's body is a lateBody, which
// decides as the body goes on. An error is a body that failed.
func (h *Handler) awaitEnd(w http.ResponseWriter, r *http.Request, inMessage bool, res *reservation) (bodyVerdict, error) {
	b, ok := r.Body.(*streamBody)
	if !ok { // readFirstMessage found the end already
		return bodyUnary, nil
	}
	t := &pendingRead{src: b.rest, done: make(chan struct{})}
	go t.read()
	timer := time.NewTimer(grpcEndGrace)
	defer timer.Stop()
	select {
	case <-t.done:
	case <-timer.C:
		b.rest = t
		r.Body = &lateBody{streamBody: *b, inMessage: inMessage}
		return bodyUndecided, nil
	}
	switch {
	case t.n == 0 && t.err == io.EOF:
		setBufferedBody(r, b.first)
		_ = b.closer.Close()
		return bodyUnary, nil
	case t.n == 0:
		return 0, fmt.Errorf("reading request body: %w", t.err)
	case inMessage:
		return bodyMalformed, errNotOneMessage
	}
	// The next message, whole: its prefix, then what it declares.
	if h.s.BodyReadTimeout > 0 {
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(h.s.BodyReadTimeout)) == nil {
			defer rc.SetReadDeadline(time.Time{})
		}
	}
	var p [grpcPrefix]byte
	if _, err := io.ReadFull(t, p[:]); err != nil {
		return bodyMalformed, errNotOneMessage
	}
	next, err := readAll(t, int64(binary.BigEndian.Uint32(p[1:])), h.s.MaxRequestBody, res)
	if err != nil {
		if errors.Is(err, errBodyTooLarge) || errors.Is(err, errOverloaded) {
			return 0, err
		}
		return bodyMalformed, errNotOneMessage
	}
	b.first = append(append(b.first[:len(b.first):len(b.first)], p[:]...), next...)
	b.rest = t // what it read beyond
	return bodyStream, nil
}

// lateBody is the body of a keyed gRPC call forwarded before its end of
// stream came (awaitEnd): its first message, then the rest as it comes,
// read through a check of its framing. The call is tracked (claimed) as a
// unary call, and stays one unless whole messages follow its first with the
// key in metadata: then it is a stream (stream reports it), which the claim
// releases when it ends, storing nothing. What is not a whole message after
// the first (a body that ends inside a prefix or a message), and anything
// at all on a route keyed from the message, is never forwarded: the body
// fails instead (errNotOneMessage), so the upstream sees the call reset, not
// a clean end, and the claim settles as any whose upstream was cut: the
// answer it had, or held.
type lateBody struct {
	streamBody
	inMessage bool
	pos       int // the framing position: bytes of the current message read, its prefix included
	size      int // the current message's length, once its prefix is read
	prefix    []byte
	messages  int         // whole messages read after the first
	streamed  atomic.Bool // a second whole message went upstream (not on inMessage)
	onStream  func()      // called once, when streamed is set (claim.run sets it)
	failed    error
}

func (b *lateBody) Read(p []byte) (int, error) {
	if len(b.first) > 0 {
		return b.streamBody.Read(p)
	}
	if b.failed != nil {
		return 0, b.failed
	}
	n, err := b.rest.Read(p)
	if n > 0 && b.inMessage {
		b.failed = errNotOneMessage
		return 0, b.failed
	}
	for _, c := range p[:n] {
		b.frame(c)
	}
	if err == io.EOF && len(b.prefix) > 0 {
		b.failed = errNotOneMessage // the body ended inside a message
		return 0, b.failed
	}
	return n, err
}

// frame follows the framing one byte on: a 5-byte prefix, then the length it
// declares. A whole message after the first makes the call a stream.
func (b *lateBody) frame(c byte) {
	if len(b.prefix) < grpcPrefix {
		b.prefix = append(b.prefix, c)
		if len(b.prefix) == grpcPrefix {
			b.size = int(binary.BigEndian.Uint32(b.prefix[1:]))
		}
	} else {
		b.pos++
	}
	if len(b.prefix) == grpcPrefix && b.pos == b.size {
		b.prefix, b.pos, b.size = b.prefix[:0], 0, 0
		if b.messages++; b.messages == 1 {
			b.streamed.Store(true)
			if b.onStream != nil {
				b.onStream()
			}
		}
	}
}

// stream reports whether the call turned out to be a client stream: whole
// messages after its first, the key in metadata.
func (b *lateBody) stream() bool { return b.streamed.Load() }

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
