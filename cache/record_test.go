package cache_test

import (
	"bytes"
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/vmihailenco/msgpack/v5"
)

func sample() *cache.Record {
	return &cache.Record{
		State:       cache.StateCompleted,
		Fingerprint: "\x00\x01fp",
		CreatedAt:   time.Unix(1700000000, 123456789).UTC(),
		Response: &cache.Response{
			Status:   201,
			Header:   http.Header{"Set-Cookie": {"a=1", "b=2"}, "Content-Type": {"application/json"}},
			Body:     []byte{0, 1, 2, 0xff},
			BodySize: 4,
			Trailer:  http.Header{"X-Checksum": {"abc"}},
			Trace:    []byte("\x00trace\xff"),
			Info:     cache.EncodeInfo(&cache.Info{Method: "POST", Path: "/p", RequestID: "r"}),
		},
	}
}

func TestResponseRoundTripAndCorrupt(t *testing.T) {
	in := sample().Response
	b, err := cache.EncodeResponse(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := cache.DecodeResponse(b)
	if err != nil || !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip: %+v, %v", out, err)
	}
	for name, b := range map[string][]byte{
		"empty":          nil,
		"garbage":        []byte("not msgpack at all"),
		"foreign string": []byte("\xa5hello"),
		"bad code":       {0xc1},
		"no status":      {0x80},
	} {
		if _, err := cache.DecodeResponse(b); !errors.Is(err, cache.ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
}

// The hand-written codec reads what reflection-based msgpack writes (and the other
// way round), so records written before it, or by other tools, still decode.
func TestResponseCodecMatchesReflection(t *testing.T) {
	type plain struct { // the same tags, without the custom methods
		Status   int                 `msgpack:"s"`
		Header   map[string][]string `msgpack:"h,omitempty"`
		Body     []byte              `msgpack:"b,omitempty"`
		Oversize bool                `msgpack:"o,omitempty"`
		BodySize int64               `msgpack:"n,omitempty"`
		Trace    []byte              `msgpack:"x,omitempty"`
		Extra    string              `msgpack:"z,omitempty"` // an unknown field: skipped
	}
	in := plain{Status: 207, Header: map[string][]string{"Set-Cookie": {"a", "b"}, "X-Empty": {}}, Body: []byte{0, 1}, BodySize: 2, Trace: []byte{7, 8}, Extra: "future"}
	b, _ := msgpack.Marshal(&in)
	got, err := cache.DecodeResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != 207 || len(got.Header["Set-Cookie"]) != 2 || string(got.Body) != "\x00\x01" || got.BodySize != 2 || string(got.Trace) != "\x07\x08" {
		t.Fatalf("decoded %+v", got)
	}
	out, _ := cache.EncodeResponse(&cache.Response{Status: 200, Header: http.Header{"A": {"1"}}, Oversize: true, BodySize: 9, Trace: []byte{9}})
	var back plain
	if err := msgpack.Unmarshal(out, &back); err != nil || back.Status != 200 || back.Header["A"][0] != "1" || !back.Oversize || back.BodySize != 9 || string(back.Trace) != "\x09" {
		t.Fatalf("plain msgpack read %+v, %v", back, err)
	}
}

func FuzzDecodeResponse(f *testing.F) {
	good, _ := cache.EncodeResponse(sample().Response)
	f.Add(good)
	f.Add([]byte{0x81, 0xa1, 's', 0xcc, 200})
	f.Add([]byte{0x82, 0xa1, 's', 0xcc, 200, 0xa1, 'h', 0xde, 0xff, 0xff})
	f.Add(nested(40, false)) // nesting in an unknown field, past the bound
	f.Add(nested(40, true))
	f.Add(nested(3, true))
	f.Fuzz(func(t *testing.T, b []byte) {
		resp, err := cache.DecodeResponse(b)
		if err != nil {
			return
		}
		again, err := cache.EncodeResponse(resp)
		if err != nil {
			t.Fatal(err)
		}
		resp2, err := cache.DecodeResponse(again)
		if err != nil || resp2.Status != resp.Status || !bytes.Equal(resp2.Body, resp.Body) || len(resp2.Header) != len(resp.Header) {
			t.Fatalf("round trip changed the response: %+v → %+v (%v)", resp, resp2, err)
		}
	})
}

// The same response always encodes to the same bytes, whatever order Go's maps
// iterate its headers in: a store names what it wrote by their digest (the
// DynamoDB store's chunk version) and recognises a second write of it.
func TestEncodeResponseIsDeterministic(t *testing.T) {
	resp := &cache.Response{Status: 200, Header: http.Header{}, Trailer: http.Header{}, Body: []byte("body"), BodySize: 4}
	for _, name := range []string{"Content-Type", "Date", "Etag", "Server", "Vary", "X-A", "X-B", "X-C", "X-D", "X-E"} {
		resp.Header[name] = []string{name + "-value"}
		resp.Trailer[name] = []string{"t"}
	}
	for i := 0; i < 40; i++ { // a few more names than the encoder's stack buffer
		resp.Header["X-Many-"+string(rune('A'+i))] = []string{"v"}
	}
	first, err := cache.EncodeResponse(resp)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		again, err := cache.EncodeResponse(resp)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, first) {
			t.Fatalf("encoding %d differs from the first", i+1)
		}
		var buf bytes.Buffer
		if err := cache.WriteResponse(&buf, resp); err != nil || !bytes.Equal(buf.Bytes(), first) {
			t.Fatalf("WriteResponse %d differs from EncodeResponse (%v)", i+1, err)
		}
	}
	back, err := cache.DecodeResponse(first)
	if err != nil || !reflect.DeepEqual(back.Header, resp.Header) || !reflect.DeepEqual(back.Trailer, resp.Trailer) {
		t.Fatalf("round trip: %+v %v", back, err)
	}
}
