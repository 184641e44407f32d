package keysource

import (
	"encoding/binary"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/idemproxy/idemproxy/middleware"
)

// Proto takes the key from a string field of a request's protobuf message, by
// field number, without the service's .proto files: proto:N reads field N of
// the request message (AIP-155's request_id), proto:N.M field M of the message
// in field N (AEP-155's aep.api.IdempotencyKey is proto:N.1). It reads the one
// message of a gRPC or gRPC-Web call (application/grpc, application/grpc-web,
// with +proto or no codec) and the body of a Connect unary call or any
// protobuf POST (application/proto, application/x-protobuf,
// application/protobuf); another Content-Type, a message with no such field,
// or an empty string (proto3's unset) is no key.
//
// Work is bounded by the message: each level of the path is scanned once, in
// place, without recursion (groups are skipped with a stack of at most
// maxGroupDepth), and nothing is allocated but the key. A key that reads two
// ways is refused (400), never guessed: a field on the path that appears
// twice (a parser keeps the last string and merges messages), or with
// another wire type. So is a message that is not protobuf on the path, one
// compressed (grpc-encoding), and a body that is not exactly one message.
type Proto struct {
	spec string             // as written: 3.1
	path []protowire.Number // field numbers, outermost first
}

// Bounds of the proto key source.
const (
	maxProtoPath  = 8   // fields in a path: proto:1.2.3.4.5.6.7.8
	maxGroupDepth = 100 // nested groups skipped
)

// NewProto returns the key source of spec: field numbers joined by dots ("3",
// "3.1"), each 1 to 536870911 and outside 19000–19999 (reserved by protobuf).
func NewProto(spec string) (Proto, error) {
	if spec == "" {
		return Proto{}, errors.New("proto: needs the key's field number (proto:N, or proto:N.M for a field of the message in field N)")
	}
	parts := strings.Split(spec, ".")
	if len(parts) > maxProtoPath {
		return Proto{}, fmt.Errorf("proto:%s: at most %d fields in a path", spec, maxProtoPath)
	}
	p := Proto{spec: spec}
	for _, s := range parts {
		n, err := strconv.ParseUint(s, 10, 32)
		switch {
		case err != nil || s == "" || s[0] == '0' || s[0] == '+':
			return Proto{}, fmt.Errorf("proto:%s: %q is not a field number (want digits, e.g. proto:3 or proto:3.1)", spec, s)
		case n > uint64(protowire.MaxValidNumber):
			return Proto{}, fmt.Errorf("proto:%s: field numbers go up to %d", spec, protowire.MaxValidNumber)
		case protowire.Number(n) >= protowire.FirstReservedNumber && protowire.Number(n) <= protowire.LastReservedNumber:
			return Proto{}, fmt.Errorf("proto:%s: field numbers %d to %d are reserved by protobuf", spec, protowire.FirstReservedNumber, protowire.LastReservedNumber)
		}
		p.path = append(p.path, protowire.Number(n))
	}
	return p, nil
}

// Key implements middleware.KeySource.
func (p Proto) Key(r *http.Request, body []byte) (string, error) {
	framed, ok := protoBody(r.Header["Content-Type"])
	if !ok {
		return "", middleware.ErrNoKey
	}
	msg := body
	if framed {
		var err error
		if msg, err = grpcMessage(body, r.Header.Get("Grpc-Encoding")); err != nil || msg == nil {
			return "", err
		}
	}
	return protoKey(msg, p.path, p.spec)
}

// NeedsBody implements middleware.KeySource.
func (Proto) NeedsBody() bool { return true }

// ID implements middleware.KeySource.
func (p Proto) ID() string { return "proto:" + p.spec }

// Describe implements middleware.KeySource.
func (p Proto) Describe() string {
	return "a string in field " + p.spec + " of its protobuf message"
}

// protoBody reports whether a body of this Content-Type (its values) is
// protobuf, and whether it is framed as gRPC messages are.
func protoBody(values []string) (framed, ok bool) {
	if len(values) != 1 {
		return false, false
	}
	mt, _, err := mime.ParseMediaType(values[0])
	if err != nil {
		return false, false
	}
	switch mt { // ParseMediaType lowers the case
	case "application/grpc", "application/grpc+proto", "application/grpc-web", "application/grpc-web+proto":
		return true, true
	case "application/proto", "application/x-protobuf", "application/protobuf":
		return false, true
	}
	return false, false
}

// Errors of a protobuf key; their text is the invalid-key problem's detail.
var (
	errProtoMalformed  = errors.New("the request message is not valid protobuf")
	errProtoGroupDepth = fmt.Errorf("the request message nests groups more than %d deep", maxGroupDepth)
	errProtoNotOne     = errors.New("the request body is not one length-prefixed gRPC message")
	errProtoNotString  = errors.New("is not a valid UTF-8 string")
)

// grpcMessage is the message of a body framed as gRPC's: a flag byte, a
// 4-byte big-endian length, and that many bytes, exactly. An empty body has
// no message (nil, no error); a compressed one cannot be read.
func grpcMessage(body []byte, encoding string) ([]byte, error) {
	if len(body) == 0 {
		return nil, middleware.ErrNoKey
	}
	if len(body) < 5 || uint64(binary.BigEndian.Uint32(body[1:5])) != uint64(len(body)-5) || body[0]&^1 != 0 {
		return nil, errProtoNotOne
	}
	if body[0] == 1 {
		if encoding == "" {
			encoding = "unnamed"
		}
		return nil, fmt.Errorf("the request message is compressed (grpc-encoding %q): a key in it is read from an uncompressed message only", encoding)
	}
	return body[5:], nil
}

// protoKey is the string at path in msg (spec names the path in errors).
func protoKey(msg []byte, path []protowire.Number, spec string) (string, error) {
	for i, num := range path {
		val, found, err := protoField(msg, num)
		if err != nil {
			return "", fmt.Errorf("field %s: %w", pathName(path[:i+1]), err)
		}
		if !found {
			return "", middleware.ErrNoKey
		}
		msg = val
	}
	switch {
	case len(msg) == 0:
		return "", middleware.ErrNoKey // proto3's default: unset
	case !utf8.Valid(msg):
		return "", fmt.Errorf("field %s %w", spec, errProtoNotString)
	}
	key := string(msg)
	if err := checkBodyKey(key); err != nil {
		return "", err
	}
	return key, nil
}

// pathName writes a path as the spec does: 3.1.
func pathName(path []protowire.Number) string {
	var b strings.Builder
	for i, n := range path {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(strconv.Itoa(int(n)))
	}
	return b.String()
}

// protoField scans msg, one level, for field num: its value, when it appears
// once, length-delimited. The whole level is read, so that a second
// occurrence is found, and must be valid protobuf.
func protoField(msg []byte, num protowire.Number) (val []byte, found bool, err error) {
	for len(msg) > 0 {
		n, typ, l := protowire.ConsumeTag(msg)
		if l < 0 {
			return nil, false, errProtoMalformed
		}
		msg = msg[l:]
		if n == num {
			switch {
			case typ != protowire.BytesType:
				return nil, false, fmt.Errorf("has wire type %d, not a string or a message", typ)
			case found:
				return nil, false, errors.New("appears twice: a key is read one way only")
			}
			found = true
		}
		if typ == protowire.StartGroupType {
			if l, err = skipGroup(msg, n); err != nil {
				return nil, false, err
			}
		} else if l = protowire.ConsumeFieldValue(n, typ, msg); l < 0 {
			return nil, false, errProtoMalformed
		}
		if n == num {
			val, _ = protowire.ConsumeBytes(msg)
		}
		msg = msg[l:]
	}
	return val, found, nil
}

// skipGroup returns the length of a group's fields and its end tag, which
// follow its start tag (of field num) in b: nested groups are followed on a
// stack of at most maxGroupDepth, never by recursion.
func skipGroup(b []byte, num protowire.Number) (int, error) {
	stack := make([]protowire.Number, 1, 8)
	stack[0] = num
	i := 0
	for len(stack) > 0 {
		n, typ, l := protowire.ConsumeTag(b[i:])
		if l < 0 {
			return 0, errProtoMalformed
		}
		i += l
		switch typ {
		case protowire.StartGroupType:
			if len(stack) == maxGroupDepth {
				return 0, errProtoGroupDepth
			}
			stack = append(stack, n)
		case protowire.EndGroupType:
			if n != stack[len(stack)-1] {
				return 0, errProtoMalformed
			}
			stack = stack[:len(stack)-1]
		default:
			if l = protowire.ConsumeFieldValue(n, typ, b[i:]); l < 0 {
				return 0, errProtoMalformed
			}
			i += l
		}
	}
	return i, nil
}
