package keysource

import (
	"encoding/binary"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/idemproxy/idemproxy/middleware"
)

// pb builds protobuf bytes.
type pb []byte

func (b pb) str(n protowire.Number, s string) pb {
	b = protowire.AppendTag(b, n, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func (b pb) msg(n protowire.Number, m pb) pb {
	b = protowire.AppendTag(b, n, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

func (b pb) varint(n protowire.Number, v uint64) pb {
	b = protowire.AppendTag(b, n, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// framed is msg as one gRPC message.
func framed(msg []byte) []byte {
	out := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

// protoKeyOf runs the key source spec on body sent with Content-Type ct.
func protoKeyOf(t *testing.T, spec, ct string, body []byte) (string, error) {
	t.Helper()
	ks, err := Parse("proto:"+spec, "Idempotency-Key")
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/idemtest.v1.Payments/Create", nil)
	r.Header.Set("Content-Type", ct)
	return ks.Key(r, body)
}

func TestProtoKey(t *testing.T) {
	aep := pb(nil).str(1, "req-1").varint(2, 42).msg(3, pb(nil).str(1, "aep-key").varint(2, 1700000000))
	for _, c := range []struct {
		name, spec, ct string
		body           []byte
		key            string
		err            string // "" key; "none" no key; else the invalid key's text
	}{
		{"AIP-155 request_id", "1", "application/grpc", framed(aep), "req-1", ""},
		{"AEP-155 idempotency_key.key", "3.1", "application/grpc", framed(aep), "aep-key", ""},
		{"+proto codec", "1", "application/grpc+proto", framed(aep), "req-1", ""},
		{"gRPC-Web", "1", "application/grpc-web+proto", framed(aep), "req-1", ""},
		{"Connect unary: bare", "3.1", "application/proto", aep, "aep-key", ""},
		{"x-protobuf", "1", "application/x-protobuf; charset=binary", aep, "req-1", ""},
		{"JSON codec: not protobuf", "1", "application/grpc+json", framed(aep), "", "none"},
		{"another type", "1", "application/json", aep, "", "none"},
		{"field absent", "4", "application/grpc", framed(aep), "", "none"},
		{"nested absent", "3.7", "application/grpc", framed(aep), "", "none"},
		{"empty string: proto3's unset", "1", "application/grpc", framed(pb(nil).str(1, "")), "", "none"},
		{"empty body", "1", "application/grpc", nil, "", "none"},
		{"empty message", "1", "application/grpc", framed(nil), "", "none"},
		{"varint where a string is", "2", "application/grpc", framed(aep), "", "wire type 0"},
		{"field twice", "1", "application/grpc", framed(pb(nil).str(1, "a").str(1, "b")), "", "appears twice"},
		{"outer field twice", "3.1", "application/grpc", framed(pb(nil).msg(3, pb(nil).str(1, "a")).msg(3, pb(nil).varint(2, 1))), "", "appears twice"},
		{"second message", "1", "application/grpc", append(framed(aep), framed(aep)...), "", "not one"},
		{"short frame", "1", "application/grpc", framed(aep)[:len(aep)], "", "not one"},
		{"compressed", "1", "application/grpc", append([]byte{1}, framed(aep)[1:]...), "", "compressed"},
		{"bad flag", "1", "application/grpc", append([]byte{2}, framed(aep)[1:]...), "", "not one"},
		{"truncated field", "1", "application/grpc", framed(aep[:len(aep)-2]), "", "not valid protobuf"},
		{"invalid UTF-8", "1", "application/grpc", framed(pb(nil).str(1, "a\xffb")), "", "UTF-8"},
		{"control character", "1", "application/grpc", framed(pb(nil).str(1, "a\nb")), "", "control"},
		{"too long", "1", "application/grpc", framed(pb(nil).str(1, strings.Repeat("k", 256))), "", "longer than 255"},
		{"field 0", "1", "application/grpc", framed([]byte{0x02, 0x01, 'x'}), "", "not valid protobuf"},
		{"a group skipped", "1", "application/grpc", framed(append(append(protowire.AppendTag(nil, 9, protowire.StartGroupType),
			pb(nil).str(1, "inside")...), append(protowire.AppendTag(nil, 9, protowire.EndGroupType), pb(nil).str(1, "outside")...)...)), "outside", ""},
		{"unbalanced group", "1", "application/grpc", framed(append(protowire.AppendTag(nil, 9, protowire.StartGroupType),
			protowire.AppendTag(nil, 8, protowire.EndGroupType)...)), "", "not valid protobuf"},
	} {
		key, err := protoKeyOf(t, c.spec, c.ct, c.body)
		switch {
		case c.err == "" && (err != nil || key != c.key):
			t.Errorf("%s: %q %v, want %q", c.name, key, err, c.key)
		case c.err == "none" && !errors.Is(err, middleware.ErrNoKey):
			t.Errorf("%s: %q %v, want no key", c.name, key, err)
		case c.err != "" && c.err != "none" && (err == nil || errors.Is(err, middleware.ErrNoKey) || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: %q %v, want an invalid key (%s)", c.name, key, err, c.err)
		}
		if err != nil && strings.Contains(err.Error(), "aep-key") || err != nil && strings.Contains(err.Error(), "req-1") {
			t.Errorf("%s: the error quotes the message: %v", c.name, err)
		}
	}
}

func TestProtoSpec(t *testing.T) {
	for _, good := range []string{"1", "3.1", "536870911", "1.2.3.4.5.6.7.8", "18999"} {
		if _, err := Parse("proto:"+good, "Idempotency-Key"); err != nil {
			t.Errorf("proto:%s: %v", good, err)
		}
	}
	for _, bad := range []string{"", "0", "01", "-1", "+1", "1.", ".1", "1..2", "a", "536870912", "19000", "19999", "1.2.3.4.5.6.7.8.9", "1 "} {
		if _, err := Parse("proto:"+bad, "Idempotency-Key"); err == nil {
			t.Errorf("proto:%s accepted", bad)
		}
	}
	ks, _ := Parse("proto:3.1", "Idempotency-Key")
	if ks.ID() != "proto:3.1" || !ks.NeedsBody() || ks.Describe() != "a string in field 3.1 of its protobuf message" {
		t.Fatalf("%s %v %q", ks.ID(), ks.NeedsBody(), ks.Describe())
	}
}

// Hostile input costs work in proportion to its size, without recursion: a
// message of nested groups to any depth is refused past maxGroupDepth, a
// length or varint beyond the message is malformed.
func TestProtoKeyBoundedWork(t *testing.T) {
	deep := make([]byte, 0, 2<<20)
	for len(deep) < 2<<20-3 {
		deep = protowire.AppendTag(deep, 7, protowire.StartGroupType)
	}
	if _, err := protoKeyOf(t, "1", "application/proto", deep); err == nil || !strings.Contains(err.Error(), "groups") {
		t.Fatalf("a million nested groups: %v", err)
	}
	for name, body := range map[string][]byte{
		"length beyond the end": append(protowire.AppendTag(nil, 1, protowire.BytesType), protowire.AppendVarint(nil, 1<<40)...),
		"eleven-byte varint":    append(protowire.AppendTag(nil, 2, protowire.VarintType), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
		"tag cut":               {0xff},
		"reserved wire type":    protowire.AppendTag(nil, 1, 6),
	} {
		if _, err := protoKeyOf(t, "1", "application/proto", body); err == nil || errors.Is(err, middleware.ErrNoKey) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzProtoKey holds the proto key source to a full decode: protowire reads
// each level on the path whole (recursion and all), and the protobuf library
// decodes the message with its schema (dynamicpb). The key found is the one
// the library decodes at that path; no key is the library's empty string; an
// invalid key is a message the decode finds malformed, a field on the path
// twice or with another wire type, or groups nested past the bound. The work
// is bounded by the input: no panic, no recursion on the input's depth.
func FuzzProtoKey(f *testing.F) {
	seeds := [][]byte{
		pb(nil).str(1, "req-1").varint(2, 42).msg(3, pb(nil).str(1, "aep-key").varint(2, 17)),
		pb(nil).msg(3, pb(nil).varint(2, 17).str(1, "k")).str(1, "r"),
		pb(nil).str(1, "a").str(1, "b"),
		pb(nil).msg(4, pb(nil).msg(3, pb(nil).str(1, "deep"))),
		append(protowire.AppendTag(nil, 9, protowire.StartGroupType), protowire.AppendTag(nil, 9, protowire.EndGroupType)...),
		{0x0a, 0x80, 0x80, 0x80, 0x80, 0x10},
	}
	for _, s := range seeds {
		for sel := range uint8(len(fuzzPaths)) {
			f.Add([]byte(s), sel)
		}
	}
	f.Fuzz(func(t *testing.T, msg []byte, sel uint8) {
		path := fuzzPaths[int(sel)%len(fuzzPaths)]
		p, err := NewProto(path)
		if err != nil {
			t.Fatal(err)
		}
		key, err := protoKey(msg, p.path, path)
		want, wantErr := oracleProtoKey(msg, p.path)
		switch {
		case wantErr == errOracleInvalid:
			if err == nil || errors.Is(err, middleware.ErrNoKey) {
				t.Fatalf("path %s: %q %v, want invalid", path, key, err)
			}
			return
		case errors.Is(wantErr, middleware.ErrNoKey):
			if !errors.Is(err, middleware.ErrNoKey) {
				t.Fatalf("path %s: %q %v, want no key", path, key, err)
			}
			return
		}
		switch {
		case !utf8.ValidString(want) || checkBodyKey(want) != nil:
			if err == nil || errors.Is(err, middleware.ErrNoKey) {
				t.Fatalf("path %s: %q accepted", path, key)
			}
			return
		case err != nil || key != want:
			t.Fatalf("path %s: %q %v, want %q", path, key, err, want)
		}
		// The service's own decode agrees, where it decodes at all (it
		// refuses, for one, invalid UTF-8 in another string field).
		m := dynamicpb.NewMessage(chargeDesc)
		if !libraryPaths[path] || proto.Unmarshal(msg, m) != nil {
			return
		}
		if got := libraryKey(m, p.path); got != key {
			t.Fatalf("path %s: %q, the library decodes %q", path, key, got)
		}
	})
}

// fuzzPaths are the paths fuzzed, in chargeDesc's schema: string fields (1, 3.1,
// 4.1, 4.3.1), a varint (2), and a field the schema lacks (9).
var fuzzPaths = []string{"1", "3.1", "4.1", "4.3.1", "2", "9"}

var errOracleInvalid = errors.New("oracle: invalid")

// oracleProtoKey walks path with protowire, each level parsed whole.
func oracleProtoKey(msg []byte, path []protowire.Number) (string, error) {
	for _, num := range path {
		var val []byte
		n := 0
		for b := msg; len(b) > 0; {
			fn, typ, l := protowire.ConsumeField(b)
			if l < 0 {
				return "", errOracleInvalid
			}
			if typ == protowire.StartGroupType && groupDepth(b[:l]) > maxGroupDepth {
				return "", errOracleInvalid
			}
			if fn == num {
				if typ != protowire.BytesType {
					return "", errOracleInvalid
				}
				_, _, tl := protowire.ConsumeTag(b)
				val, _ = protowire.ConsumeBytes(b[tl:])
				n++
			}
			b = b[l:]
		}
		switch {
		case n > 1:
			return "", errOracleInvalid
		case n == 0:
			return "", middleware.ErrNoKey
		}
		msg = val
	}
	if len(msg) == 0 {
		return "", middleware.ErrNoKey
	}
	return string(msg), nil
}

// groupDepth is the deepest nesting of groups in a field (a group, parsed
// already), counting its own.
func groupDepth(field []byte) int {
	depth, deepest := 0, 0
	for b := field; len(b) > 0; {
		_, typ, l := protowire.ConsumeTag(b)
		b = b[l:]
		switch typ {
		case protowire.StartGroupType:
			depth++
			deepest = max(deepest, depth)
		case protowire.EndGroupType:
			depth--
		default:
			b = b[protowire.ConsumeFieldValue(0, typ, b):]
		}
	}
	return deepest
}

// libraryKey is the string the protobuf library decoded at path (of
// libraryPaths), by field number.
func libraryKey(m protoreflect.Message, path []protowire.Number) string {
	for i, num := range path {
		fd := m.Descriptor().Fields().ByNumber(num)
		if i == len(path)-1 {
			return m.Get(fd).String()
		}
		if !m.Has(fd) {
			return ""
		}
		m = m.Get(fd).Message()
	}
	return ""
}

// libraryPaths are the fuzzed paths to a string field of chargeDesc's schema.
var libraryPaths = map[string]bool{"1": true, "3.1": true, "4.1": true, "4.3.1": true}
