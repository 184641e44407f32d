package cache

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// FuzzFastDecoderAgrees: wherever the hand-written decoder takes an input, the
// msgpack library decodes it too, to the same response. (Where it declines,
// the library's answer is used as it is.)
func FuzzFastDecoderAgrees(f *testing.F) {
	for _, r := range []*Response{
		{Status: 201, Header: http.Header{"Content-Type": {"application/json"}, "Set-Cookie": {"a=1", "b=2"}}, Body: []byte(`{"ok":true}`), BodySize: 11},
		{Status: 204},
		{Status: 200, Header: http.Header{"X-Empty": {}, "X-Nil": nil}, Body: []byte{0, 1, 2, 0xff}, BodySize: 4},
		{Status: 500, Oversize: true, BodySize: 1 << 40},
		{Status: 200, Body: make([]byte, 70000), BodySize: 70000},
		{Status: 201, Body: []byte("ok"), Trace: []byte("0123456789abcdef01234567\x01")},
		{Status: 201, Header: http.Header{"A": {"1"}}, Info: EncodeInfo(&Info{Method: "POST", Path: "/p"})},
	} {
		b, err := EncodeResponse(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x81, 0xa1, 's', 0xcc, 200})
	f.Add([]byte{0x82, 0xa1, 's', 0xcc, 200, 0xa1, 'b', 0xc4, 0x00})
	f.Add([]byte{0x82, 0xa1, 's', 0xcc, 200, 0xa1, 'h', 0xc0})
	f.Add([]byte{0x82, 0xa1, 's', 0xcc, 200, 0xa1, 'b', 0xc0})
	f.Add([]byte{0x83, 0xa1, 's', 0xd1, 0x01, 0x2c, 0xa1, 'n', 0xd3, 0, 0, 0, 0, 0, 0, 0, 5, 0xa1, 'o', 0xc2})
	f.Add([]byte{0x82, 0xa1, 's', 0xcc, 200, 0xa1, 'h', 0x81, 0xa1, 'A', 0xc0})
	f.Add([]byte{0x81, 0xa1, 's', 0xcd})
	f.Add([]byte{0x82, 0xa1, 's', 0xcc, 200, 0xa1, 'x', 0xc4, 0x02, 0x07, 0x08})
	f.Add([]byte{0x82, 0xa1, 's', 0xcc, 200, 0xa1, 'x', 0xc0})
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := decodeResponseFast(b, "")
		fromString, sok := decodeResponseFast(b, string(b)) // DecodeResponseString's path
		if ok != sok || ok && !reflect.DeepEqual(fast, fromString) {
			t.Fatalf("from bytes and from a string disagree on %x: %v %#v, %v %#v", b, ok, fast, sok, fromString)
		}
		if !ok {
			return
		}
		var lib Response
		if err := msgpack.Unmarshal(b, &lib); err != nil {
			t.Fatalf("the fast decoder took %x, the library refused it: %v", b, err)
		}
		if !reflect.DeepEqual(*fast, lib) {
			t.Fatalf("decoders disagree on %x:\nfast    %#v\nlibrary %#v", b, *fast, lib)
		}
	})
}

// The hand-written decoder against the library, on the response
// BenchmarkDecodeResponse uses.
func BenchmarkDecodeResponsePaths(b *testing.B) {
	enc, _ := EncodeResponse(&Response{
		Status: 201,
		Header: http.Header{"Content-Type": {"application/json"}, "Date": {"Sun, 22 Nov 2026 08:00:00 GMT"}, "X-Request-Id": {"abc123"}},
		Body:   []byte(`{"id":"ch_1","amount":100,"currency":"EUR","status":"succeeded"}`),
	})
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := decodeResponseFast(enc, ""); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("string", func(b *testing.B) { // a Redis reply: DecodeResponseString
		s := string(enc)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeResponseString(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("library", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r Response
			if err := decodeResponse(enc, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
