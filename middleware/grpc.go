package middleware

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// gRPC (docs/grpc.md). A unary gRPC call is an HTTP/2 POST of one
// length-prefixed message whose answer is HTTP 200, a message, and trailers
// with grpc-status: the core tracks it as any POST, records its trailers with
// its answer and replays them. Three things differ, all decided here from the
// request and the response themselves, never from configuration:
//
//   - The answers the core writes itself. A gRPC client reads any HTTP status
//     but 200 as a transport failure ("unexpected HTTP status code"), so to a
//     gRPC call every such answer is HTTP 200 with grpc-status and
//     grpc-message in a trailers-only response, whatever the route's error
//     format: grpcCodeOf says which code. The shape follows the request's
//     Content-Type, so a route that serves REST and gRPC answers each client
//     in its own protocol, and a client that chooses its Content-Type chooses
//     only the shape of its own answers.
//   - Which answers are stored. A gRPC error travels as HTTP 200: its
//     grpc-status counts as the HTTP status gRPC maps it to (grpcCode.httpStatus)
//     for store_statuses, so UNAVAILABLE or INTERNAL release the key as a 503
//     or a 500 does.
//   - The body. A call is tracked when its body is one message and the end of
//     the stream; a stream's further messages make it pass through untracked
//     (grpcbody.go).

// grpcCode is a gRPC status code (google.golang.org/grpc/codes).
type grpcCode int

// The gRPC status codes.
const (
	grpcOK                 grpcCode = 0
	grpcCanceled           grpcCode = 1
	grpcUnknown            grpcCode = 2
	grpcInvalidArgument    grpcCode = 3
	grpcDeadlineExceeded   grpcCode = 4
	grpcNotFound           grpcCode = 5
	grpcAlreadyExists      grpcCode = 6
	grpcPermissionDenied   grpcCode = 7
	grpcResourceExhausted  grpcCode = 8
	grpcFailedPrecondition grpcCode = 9
	grpcAborted            grpcCode = 10
	grpcOutOfRange         grpcCode = 11
	grpcUnimplemented      grpcCode = 12
	grpcInternal           grpcCode = 13
	grpcUnavailable        grpcCode = 14
	grpcDataLoss           grpcCode = 15
	grpcUnauthenticated    grpcCode = 16
)

// grpcCodes are the codes' names and the HTTP status each stands for, as
// google.api.Code and grpc-gateway map them.
var grpcCodes = [...]struct {
	name   string
	status int
}{
	{"OK", 200}, {"CANCELLED", 499}, {"UNKNOWN", 500}, {"INVALID_ARGUMENT", 400},
	{"DEADLINE_EXCEEDED", 504}, {"NOT_FOUND", 404}, {"ALREADY_EXISTS", 409},
	{"PERMISSION_DENIED", 403}, {"RESOURCE_EXHAUSTED", 429}, {"FAILED_PRECONDITION", 400},
	{"ABORTED", 409}, {"OUT_OF_RANGE", 400}, {"UNIMPLEMENTED", 501}, {"INTERNAL", 500},
	{"UNAVAILABLE", 503}, {"DATA_LOSS", 500}, {"UNAUTHENTICATED", 401},
}

// String is the code's name: UNAVAILABLE.
func (c grpcCode) String() string {
	if c >= 0 && int(c) < len(grpcCodes) {
		return grpcCodes[c].name
	}
	return "CODE(" + strconv.Itoa(int(c)) + ")"
}

// httpStatus is the HTTP status c stands for: what store_statuses reads for a
// gRPC answer. A code beyond the known ones is UNKNOWN's, 500.
func (c grpcCode) httpStatus() int {
	if c >= 0 && int(c) < len(grpcCodes) {
		return grpcCodes[c].status
	}
	return http.StatusInternalServerError
}

// problemCodes are the gRPC codes of the core's own answers, by problem type.
// Each "retry the same call later" is UNAVAILABLE, the code gRPC retry
// policies retry (gRPC: "use UNAVAILABLE if the client can retry just the
// failing call"); each "not now, not like this" one a client must not retry
// as it is.
var problemCodes = map[string]grpcCode{
	ProblemMissingKey:       grpcInvalidArgument,
	ProblemInvalidKey:       grpcInvalidArgument,
	ProblemBodyTooLarge:     grpcResourceExhausted, // gRPC's own code for a message too large
	ProblemBodyUnreadable:   grpcInvalidArgument,
	ProblemBodyMalformed:    grpcInvalidArgument,
	ProblemInFlight:         grpcUnavailable, // retried by the policy, with the pushback, until it replays
	ProblemMismatch:         grpcFailedPrecondition,
	ProblemNotReplayable:    grpcAlreadyExists, // done once, not again: the one "it exists" answer
	ProblemStoreUnavailable: grpcUnavailable,
	ProblemOutcomeUnknown:   grpcUnknown, // held: retries get the same answer
	ProblemInvalidSignature: grpcUnauthenticated,
	ProblemNonCanonicalPath: grpcInvalidArgument,
	ProblemInvalidHost:      grpcInvalidArgument,
	ProblemUpgradeRefused:   grpcInvalidArgument,
	ProblemOverloaded:       grpcUnavailable,
	ProblemNotAcceptable:    grpcFailedPrecondition,
}

// GRPCCodeOf is the gRPC status code (google.golang.org/grpc/codes) p is
// answered with to a gRPC call.
func GRPCCodeOf(p Problem) int { return int(grpcCodeOf(p)) }

// grpcCodeOf is the gRPC code p is answered with to a gRPC call. A problem
// type of the core's has its own (docs/grpc.md has the table); another (the
// proxy's upstream-unavailable, a Go user's own) is UNAVAILABLE when it may be
// retried as it is (Retryable), and otherwise the code google.api.Code maps
// its status from.
func grpcCodeOf(p Problem) grpcCode {
	if c, ok := problemCodes[p.Type]; ok {
		return c
	}
	if p.Retryable {
		return grpcUnavailable
	}
	switch p.Status {
	case http.StatusBadRequest:
		return grpcInvalidArgument
	case http.StatusUnauthorized:
		return grpcUnauthenticated
	case http.StatusForbidden:
		return grpcPermissionDenied
	case http.StatusNotFound:
		return grpcNotFound
	case http.StatusConflict:
		return grpcAborted
	case http.StatusPreconditionFailed:
		return grpcFailedPrecondition
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		return grpcResourceExhausted
	case http.StatusNotImplemented:
		return grpcUnimplemented
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return grpcUnavailable
	}
	return grpcUnknown
}

// IsGRPC reports whether r is a gRPC call: one Content-Type, application/grpc
// or application/grpc+<codec> (with parameters or not, in any case).
// gRPC-Web (application/grpc-web…) and Connect (application/proto, …) are
// not: their clients read HTTP statuses, and get the route's error format.
func IsGRPC(r *http.Request) bool {
	ct := r.Header["Content-Type"]
	return len(ct) == 1 && isGRPCType(ct[0])
}

// isGRPCType reports whether a Content-Type is gRPC's (see IsGRPC).
func isGRPCType(ct string) bool {
	const grpc = "application/grpc"
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(mt)
	if len(mt) < len(grpc) || !strings.EqualFold(mt[:len(grpc)], grpc) {
		return false
	}
	rest := mt[len(grpc):]
	return rest == "" || len(rest) > 1 && rest[0] == '+'
}

// grpcStatusOf is the grpc-status of a recorded gRPC answer (status 200 and a
// gRPC Content-Type), from its trailers or, in a trailers-only answer, its
// headers; ok is false for an answer that is not gRPC's. An answer that ends
// without a grpc-status, or with one that is not a number, is INTERNAL, as a
// gRPC client reads it.
func grpcStatusOf(status int, header, trailer http.Header) (c grpcCode, ok bool) {
	if status != http.StatusOK || !isGRPCType(header.Get("Content-Type")) {
		return 0, false
	}
	v, found := trailer["Grpc-Status"]
	if !found {
		v = header["Grpc-Status"]
	}
	if len(v) != 1 {
		return grpcInternal, true
	}
	n, err := strconv.ParseInt(v[0], 10, 32)
	if err != nil || n < 0 {
		return grpcInternal, true
	}
	return grpcCode(n), true
}

// storeStatus is the status store_statuses reads for a recorded answer: its
// HTTP status, or for a gRPC answer the one its grpc-status stands for.
func (rw *recorder) storeStatus() int {
	if rw.status == http.StatusOK { // a gRPC answer is a 200
		if c, ok := grpcStatusOf(rw.status, rw.header, rw.trailers()); ok {
			return c.httpStatus()
		}
	}
	return rw.status
}

// grpcPushback is the metadata by which a gRPC answer tells the client's retry
// policy when to retry (gRPC A6, milliseconds).
const grpcPushback = "Grpc-Retry-Pushback-Ms"

// grpcProblem sets the headers of p's answer to a gRPC call (writeProblem
// writes it): HTTP 200, a trailers-only answer (headers and the end of the
// stream, no message) with grpc-status (grpcCodeOf) and grpc-message (title
// and detail), and for an answer to retry later grpc-retry-pushback-ms.
func grpcProblem(h http.Header, p Problem, retryAfter time.Duration) {
	h.Del("Content-Length")
	h.Del("Trailer")
	h.Set("Content-Type", "application/grpc")
	h.Set("Grpc-Status", strconv.Itoa(int(grpcCodeOf(p))))
	h.Set("Grpc-Message", grpcMessage(p.Title+": "+p.Detail))
	if retryAfter > 0 {
		h.Set(grpcPushback, strconv.FormatInt(max(retryAfter.Milliseconds(), 1), 10))
	}
}

// grpcMessage percent-encodes s as grpc-message is (gRPC's HTTP/2 protocol):
// every byte outside printable ASCII, and %.
func grpcMessage(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c <= 0x7e && c != '%' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}
