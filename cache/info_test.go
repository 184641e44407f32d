package cache_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/vmihailenco/msgpack/v5"
)

// An Info is bounded whatever it is given: strings cut at their bound (at a
// rune's start), the first event and the latest kept.
func TestInfoBounded(t *testing.T) {
	in := &cache.Info{Method: "POST", Path: "/" + strings.Repeat("é", 400), Route: strings.Repeat("r", 500),
		RequestID: strings.Repeat("i", 500), Client: strings.Repeat("c", 500), FirstSeen: time.Unix(1700000000, 0)}
	for i := range 50 {
		in.Events = append(in.Events, cache.Event{Kind: cache.EventResolved, By: strings.Repeat("b", 100), At: time.Unix(int64(i), 0)})
	}
	in.Events[0].Kind = cache.EventHeld
	enc := cache.EncodeInfo(in)
	if enc == "" || len(enc) > cache.MaxInfo {
		t.Fatalf("encoded %d bytes, want 1 to %d", len(enc), cache.MaxInfo)
	}
	out, err := cache.DecodeInfo(enc)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Path) > cache.MaxInfoPath || !strings.HasSuffix(out.Path, "…") || !strings.HasPrefix(out.Path, "/é") ||
		len(out.Route) > cache.MaxInfoString || len(out.Events) != cache.MaxEvents ||
		out.Events[0].Kind != cache.EventHeld || !out.Events[cache.MaxEvents-1].At.Equal(time.Unix(49, 0)) {
		t.Fatalf("bounded: path %d bytes %q…, route %d, %d events %+v", len(out.Path), out.Path[:8], len(out.Route), len(out.Events), out.Events[0])
	}
	if len(in.Events) != 50 || len(in.Path) != 801 {
		t.Fatal("EncodeInfo changed its argument")
	}
}

// Rolling upgrade: a response with an Info decodes for a reader that knows
// nothing of it (the previous version's decoder takes unknown keys through
// the library, which skips them), and one without decodes here with none.
func TestResponseInfoBothWays(t *testing.T) {
	info := cache.EncodeInfo(&cache.Info{Method: "POST", Path: "/a", RequestID: "r1"})
	b, err := cache.EncodeResponse(&cache.Response{Status: 201, Body: []byte("ok"), BodySize: 2, Info: info})
	if err != nil {
		t.Fatal(err)
	}
	var previous struct { // the previous version's fields
		Status   int    `msgpack:"s"`
		Body     []byte `msgpack:"b,omitempty"`
		BodySize int64  `msgpack:"n,omitempty"`
	}
	if err := msgpack.Unmarshal(b, &previous); err != nil || previous.Status != 201 || string(previous.Body) != "ok" {
		t.Fatalf("a reader without the field: %+v, %v", previous, err)
	}
	got, err := cache.DecodeResponse(b)
	if err != nil || got.Info != info {
		t.Fatalf("decoded info %q, %v", got.Info, err)
	}
	if s, err := cache.DecodeResponseString(string(b)); err != nil || s.Info != info {
		t.Fatalf("decoded from a string: %q, %v", s.Info, err)
	}
	old, _ := msgpack.Marshal(&previous)
	got, err = cache.DecodeResponse(old)
	if err != nil || got.Info != "" || got.Status != 201 {
		t.Fatalf("a previous version's response: %+v, %v", got, err)
	}
	if i, err := cache.InfoOf(&cache.Record{State: cache.StateCompleted, Response: got}); i != nil || err != nil {
		t.Fatalf("info of a previous version's record: %+v, %v", i, err)
	}
}

// The hand-written encoder writes what the library writes from the tags.
func TestEncodeInfoMatchesReflection(t *testing.T) {
	for _, in := range []*cache.Info{
		{},
		{Method: "POST", Path: "/a", Route: "/", RequestID: "r", Client: "c", FirstSeen: time.Unix(1700000000, 5).UTC()},
		{Path: "/b", Events: []cache.Event{{Kind: cache.EventHeld, By: cache.ByLapse}, {Kind: cache.EventResolved, By: cache.ByOperator, At: time.Unix(9, 0).UTC()}}},
	} {
		want, err := msgpack.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := cache.EncodeInfo(in); got != string(want) {
			t.Errorf("EncodeInfo(%+v) = %x, the library writes %x", in, got, want)
		}
	}
	if raceEnabled {
		return // the race detector drops pooled encoders at random (race_test.go)
	}
	in := &cache.Info{Method: "POST", Path: "/a", RequestID: "r", FirstSeen: time.Now()}
	if n := testing.AllocsPerRun(100, func() { cache.EncodeInfo(in) }); n > 1 {
		t.Errorf("EncodeInfo: %v allocations, want 1", n)
	}
}
