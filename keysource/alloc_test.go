package keysource

import (
	"bytes"
	"net/http/httptest"
	"runtime"
	"testing"

	"github.com/idemproxy/idemproxy/middleware"
)

// bytesAllocated returns the bytes f allocates per call, averaged over runs.
func bytesAllocated(runs int, f func()) uint64 {
	f() // warm up: lazily built tables are not the call's cost
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}

// Extracting a key from a body costs memory bounded by the key, not by the
// body: a 10 MiB JSON array or form body allocates no more than a few
// kilobytes. Before, json: unmarshalled the whole document per pointer token
// (hundreds of MiB for one 10 MiB array) and form: built url.ParseQuery's map
// of every field and a string copy of the body.
func TestKeyExtractionMemoryIsBoundedByTheKey(t *testing.T) {
	const size = 10 << 20
	var arr bytes.Buffer
	arr.WriteString(`{"pad":[`)
	for arr.Len() < size {
		arr.WriteString(`{"id":"x","n":[1,2.5e3,true,null,"\u00e9t\u00e9"]},`)
	}
	arr.WriteString(`0],"id":"the-key"}`)
	var top bytes.Buffer
	top.WriteString(`[`)
	for top.Len() < size {
		top.WriteString(`{"id":"x"},`)
	}
	top.WriteString(`0]`)
	var form bytes.Buffer
	for form.Len() < size {
		form.WriteString("amount=5&note=caf%C3%A9+au+lait&")
	}
	form.WriteString("idempotency_key=the-key")

	for _, tc := range []struct {
		source string
		body   []byte
		want   string // "" means no key
	}{
		{"json:/id", arr.Bytes(), "the-key"},
		{"json:/id", top.Bytes(), ""},
		{"json:/pad/3/n/4", arr.Bytes(), "été"},
		{"form:idempotency_key", form.Bytes(), "the-key"},
	} {
		ks, err := Parse(tc.source, "Idempotency-Key")
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest("POST", "/", nil)
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		got, err := ks.Key(r, tc.body)
		if tc.want == "" && err != middleware.ErrNoKey || tc.want != "" && (err != nil || got != tc.want) {
			t.Fatalf("%s: %q, %v; want %q", tc.source, got, err, tc.want)
		}
		n := bytesAllocated(3, func() { _, _ = ks.Key(r, tc.body) })
		t.Logf("%s over %d MiB: %d bytes allocated", tc.source, len(tc.body)>>20, n)
		if n > 4<<10 {
			t.Errorf("%s: %d bytes allocated to extract a key from a %d-byte body; want at most 4 KiB",
				tc.source, n, len(tc.body))
		}
	}
}
