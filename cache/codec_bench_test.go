package cache_test

import (
	"net/http"
	"testing"

	"github.com/idemproxy/idemproxy/cache"
)

func benchResponse() *cache.Response {
	return &cache.Response{
		Status: 201,
		Header: http.Header{"Content-Type": {"application/json"}, "Date": {"Sun, 22 Nov 2026 08:00:00 GMT"}, "X-Request-Id": {"abc123"}},
		Body:   []byte(`{"id":"ch_1","amount":100,"currency":"EUR","status":"succeeded"}`),
	}
}

func BenchmarkEncodeResponse(b *testing.B) {
	resp := benchResponse()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cache.EncodeResponse(resp); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeResponse(b *testing.B) {
	blob, _ := cache.EncodeResponse(benchResponse())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cache.DecodeResponse(blob); err != nil {
			b.Fatal(err)
		}
	}
}
