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
//     format: GRPCCodeOf says which code. The shape follows the request's
//     Content-Type, so a route that serves REST and gRPC answers each client
//     in its own protocol, and a client that chooses its Content-Type chooses
//     only the shape of its own answers.
//   - Which answers are stored. A gRPC error travels as HTTP 200: its
//     grpc-status counts as the HTTP status gRPC maps it to (Code.HTTPStatus)
//     for store_statuses, so UNAVAILABLE or INTERNAL release the key as a 503
//     or a 500 does.
//   - The body. A call is tracked when its body is one message and the end of
//     the stream; a stream's further messages make it pass through untracked
//     (grpcbody.go).

// GRPCCode is a gRPC status code (google.golang.org/grpc/codes).
type GRPCCode int

// The gRPC status codes.
const (
	GRPCOK                 GRPCCode = 0
	GRPCCanceled           GRPCCode = 1
	GRPCUnknown            GRPCCode = 2
	GRPCInvalidArgument    GRPCCode = 3
	GRPCDeadlineExceeded   GRPCCode = 4
	GRPCNotFound           GRPCCode = 5
	GRPCAlreadyExists      GRPCCode = 6
	GRPCPermissionDenied   GRPCCode = 7
	GRPCResourceExhausted  GRPCCode = 8
	GRPCFailedPrecondition GRPCCode = 9
	GRPCAborted            GRPCCode = 10
	GRPCOutOfRange         GRPCCode = 11
	GRPCUnimplemented      GRPCCode = 12
	GRPCInternal           GRPCCode = 13
	GRPCUnavailable        GRPCCode = 14
	GRPCDataLoss           GRPCCode = 15
	GRPCUnauthenticated    GRPCCode = 16
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
func (c GRPCCode) String() string {
	if c >= 0 && int(c) < len(grpcCodes) {
		return grpcCodes[c].name
	}
	return "CODE(" + strconv.Itoa(int(c)) + ")"
}

// HTTPStatus is the HTTP status c stands for: what store_statuses reads for a
// gRPC answer. A code beyond the known ones is UNKNOWN's, 500.
func (c GRPCCode) HTTPStatus() int {
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
var problemCodes = map[string]GRPCCode{
	ProblemMissingKey:       GRPCInvalidArgument,
	ProblemInvalidKey:       GRPCInvalidArgument,
	ProblemBodyTooLarge:     GRPCResourceExhausted, // gRPC's own code for a message too large
	ProblemBodyUnreadable:   GRPCInvalidArgument,
	ProblemBodyMalformed:    GRPCInvalidArgument,
	ProblemInFlight:         GRPCUnavailable, // retried by the policy, with the pushback, until it replays
	ProblemMismatch:         GRPCFailedPrecondition,
	ProblemNotReplayable:    GRPCAlreadyExists, // done once, not again: the one "it exists" answer
	ProblemStoreUnavailable: GRPCUnavailable,
	ProblemOutcomeUnknown:   GRPCUnknown, // held: retries get the same answer
	ProblemInvalidSignature: GRPCUnauthenticated,
	ProblemNonCanonicalPath: GRPCInvalidArgument,
	ProblemInvalidHost:      GRPCInvalidArgument,
	ProblemUpgradeRefused:   GRPCInvalidArgument,
	ProblemOverloaded:       GRPCUnavailable,
	ProblemNotAcceptable:    GRPCFailedPrecondition,
}

// GRPCCodeOf is the gRPC code p is answered with to a gRPC call. A problem
// type of the core's has its own (docs/grpc.md has the table); another (the
// proxy's upstream-unavailable, a Go user's own) is UNAVAILABLE when it may be
// retried as it is (Retryable), and otherwise the code google.api.Code maps
// its status from.
func GRPCCodeOf(p Problem) GRPCCode {
	if c, ok := problemCodes[p.Type]; ok {
		return c
	}
	if p.Retryable {
		return GRPCUnavailable
	}
	switch p.Status {
	case http.StatusBadRequest:
		return GRPCInvalidArgument
	case http.StatusUnauthorized:
		return GRPCUnauthenticated
	case http.StatusForbidden:
		return GRPCPermissionDenied
	case http.StatusNotFound:
		return GRPCNotFound
	case http.StatusConflict:
		return GRPCAborted
	case http.StatusPreconditionFailed:
		return GRPCFailedPrecondition
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		return GRPCResourceExhausted
	case http.StatusNotImplemented:
		return GRPCUnimplemented
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return GRPCUnavailable
	}
	return GRPCUnknown
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
func grpcStatusOf(status int, header, trailer http.Header) (c GRPCCode, ok bool) {
	if status != http.StatusOK || !isGRPCType(header.Get("Content-Type")) {
		return 0, false
	}
	v, found := trailer["Grpc-Status"]
	if !found {
		v = header["Grpc-Status"]
	}
	if len(v) != 1 {
		return GRPCInternal, true
	}
	n, err := strconv.ParseInt(v[0], 10, 32)
	if err != nil || n < 0 {
		return GRPCInternal, true
	}
	return GRPCCode(n), true
}

// storeStatus is the status store_statuses reads for a recorded answer: its
// HTTP status, or for a gRPC answer the one its grpc-status stands for.
func (rw *recorder) storeStatus() int {
	if rw.status == http.StatusOK { // a gRPC answer is a 200
		if c, ok := grpcStatusOf(rw.status, rw.header, rw.trailers()); ok {
			return c.HTTPStatus()
		}
	}
	return rw.status
}

// GRPCPushback is the metadata by which a gRPC answer tells the client's retry
// policy when to retry (gRPC A6, milliseconds).
const GRPCPushback = "Grpc-Retry-Pushback-Ms"

// grpcProblem sets the headers of p's answer to a gRPC call (writeProblem
// writes it): HTTP 200, a trailers-only answer (headers and the end of the
// stream, no message) with grpc-status (GRPCCodeOf) and grpc-message (title
// and detail), and for an answer to retry later grpc-retry-pushback-ms.
func grpcProblem(h http.Header, p Problem, retryAfter time.Duration) {
	h.Del("Content-Length")
	h.Del("Trailer")
	h.Set("Content-Type", "application/grpc")
	h.Set("Grpc-Status", strconv.Itoa(int(GRPCCodeOf(p))))
	h.Set("Grpc-Message", grpcMessage(p.Title+": "+p.Detail))
	if retryAfter > 0 {
		h.Set(GRPCPushback, strconv.FormatInt(max(retryAfter.Milliseconds(), 1), 10))
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
