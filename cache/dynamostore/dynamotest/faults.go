package dynamotest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Fault is a failure DynamoDB Local does not produce, injected between a
// client and the server by a Faults transport.
type Fault int

const (
	// DropReply forwards the request (the server applies it) and loses the
	// reply: the client sees its connection reset, and the SDK re-sends.
	DropReply Fault = iota + 1
	// Throttle answers ThrottlingException (HTTP 400) without forwarding.
	Throttle
	// ServerError answers InternalServerError (HTTP 500) without forwarding.
	ServerError
	// ServerErrorAfter forwards the request (the server applies it) and
	// answers InternalServerError (HTTP 500) instead of its reply.
	ServerErrorAfter
	// StripItem forwards the request and, when the server answers
	// ConditionalCheckFailedException, takes the existing item out of the
	// answer (as a server that ignores ReturnValuesOnConditionCheckFailure would).
	StripItem
)

func (f Fault) String() string {
	switch f {
	case DropReply:
		return "drop-reply"
	case Throttle:
		return "throttle"
	case ServerError:
		return "server-error"
	case ServerErrorAfter:
		return "server-error-after"
	case StripItem:
		return "strip-item"
	}
	return fmt.Sprintf("fault(%d)", int(f))
}

// Faults is an http.RoundTripper for a DynamoDB client (dynamodb.Options.HTTPClient
// = &http.Client{Transport: f}) that counts the API calls it carries and injects
// faults into the next calls of a given name. The zero value forwards through
// http.DefaultTransport.
type Faults struct {
	Next http.RoundTripper

	mu       sync.Mutex
	pending  []*pending
	calls    map[string]int
	injected map[string]int
	writes   *writeLimit // BatchWriteItem's pace, when LimitWrites is in force
}

type pending struct {
	call  string
	fault Fault
	n     int
}

// Inject makes the next n requests of the API call (PutItem, UpdateItem,
// DeleteItem, GetItem, BatchGetItem, BatchWriteItem, …) meet fault. Faults
// injected for the same call are met in the order given.
func (f *Faults) Inject(call string, fault Fault, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending = append(f.pending, &pending{call: call, fault: fault, n: n})
}

// Clear drops the faults still pending.
func (f *Faults) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending = nil
}

// Calls is how many requests of each API call were sent (a re-sent request
// counts again), since the last Reset.
func (f *Faults) Calls() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.calls))
	for k, v := range f.calls {
		out[k] = v
	}
	return out
}

// Total is how many requests were sent since the last Reset.
func (f *Faults) Total() int {
	n := 0
	for _, v := range f.Calls() {
		n += v
	}
	return n
}

// Injected is how many faults were met by requests of the call.
func (f *Faults) Injected(call string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.injected[call]
}

// Reset zeroes the call counts (and Puts).
func (f *Faults) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = nil
	if f.writes != nil {
		f.writes.puts = 0
	}
}

// take counts a request of call and returns the fault it meets, if any.
func (f *Faults) take(call string) Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[call]++
	for i, p := range f.pending {
		if p.call != call {
			continue
		}
		p.n--
		if p.n <= 0 {
			f.pending = append(f.pending[:i], f.pending[i+1:]...)
		}
		if f.injected == nil {
			f.injected = map[string]int{}
		}
		f.injected[call]++
		return p.fault
	}
	return 0
}

// callName is the API call a request makes: X-Amz-Target is
// "DynamoDB_20120810.PutItem".
func callName(r *http.Request) string {
	t := r.Header.Get("X-Amz-Target")
	if i := strings.LastIndexByte(t, '.'); i >= 0 {
		return t[i+1:]
	}
	return t
}

// RoundTrip implements http.RoundTripper.
func (f *Faults) RoundTrip(r *http.Request) (*http.Response, error) {
	next := f.Next
	if next == nil {
		next = http.DefaultTransport
	}
	call := callName(r)
	fault := f.take(call)
	if fault == 0 && call == "BatchWriteItem" && f.limited() {
		return f.limitWrites(next, r)
	}
	switch fault {
	case Throttle:
		drain(r)
		return errorReply(r, http.StatusBadRequest, "ThrottlingException", "Rate of requests exceeds the allowed throughput."), nil
	case ServerError:
		drain(r)
		return errorReply(r, http.StatusInternalServerError, "InternalServerError", "Internal server error (injected)"), nil
	case DropReply, ServerErrorAfter:
		resp, err := next.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if fault == ServerErrorAfter {
			return errorReply(r, http.StatusInternalServerError, "InternalServerError", "Internal server error (injected, after the request was applied)"), nil
		}
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	case StripItem:
		resp, err := next.RoundTrip(r)
		if err != nil || resp.StatusCode != http.StatusBadRequest {
			return resp, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) == nil && strings.HasSuffix(strings.Trim(string(m["__type"]), `"`), "ConditionalCheckFailedException") {
			delete(m, "Item")
			body, _ = json.Marshal(m)
		}
		setBody(resp, body)
		return resp, nil
	default:
		return next.RoundTrip(r)
	}
}

func drain(r *http.Request) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
}

// errorReply is a DynamoDB error answer, with the CRC32 the SDK checks.
func errorReply(r *http.Request, status int, typ, msg string) *http.Response {
	body, _ := json.Marshal(map[string]string{"__type": "com.amazonaws.dynamodb.v20120810#" + typ, "message": msg})
	resp := &http.Response{
		Status:     fmt.Sprintf("%d %s", status, http.StatusText(status)),
		StatusCode: status,
		Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": {"application/x-amz-json-1.0"}, "X-Amzn-Requestid": {"dynamotest-injected"}},
		Request: r,
	}
	setBody(resp, body)
	return resp
}

func setBody(resp *http.Response, body []byte) {
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	resp.Header.Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10))
}
