package proxy_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/idemproxy/idemproxy/internal/forward"
	"github.com/idemproxy/idemproxy/proxy"
	"github.com/idemproxy/idemproxy/test/grpctest"
)

// BenchmarkGRPCUnary is the cost of a unary gRPC call through the proxy
// (memory store) against a bare reverse proxy: httputil.ReverseProxy over the
// same h2c transport (forward.NewH2CTransport), on the same kind of h2c
// listener. Everything runs in this process: a grpc-go client (one
// connection, 32 calls in flight), the proxy under test, a grpc-go server.
// What differs between the rows is the proxy; cpu-µs/op is the process's CPU
// time (user and system) per call, steadier than ns/op on a shared machine.
//
//	go test -run '^$' -bench BenchmarkGRPCUnary -benchtime 20000x -count 5 ./proxy
func BenchmarkGRPCUnary(b *testing.B) {
	upstream := grpctest.Start(b, &grpctest.Server{})
	target, _ := url.Parse("http://" + upstream)
	bare := &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport:  forward.NewH2CTransport(0),
		BufferPool: forward.BufferPool{},
	}
	cfg, err := proxy.ParseArgs([]string{"--upstream", "h2c://" + upstream, "--log-level", "warn"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	idem, err := proxy.New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { idem.Close() })
	var keys atomic.Int64
	for _, c := range []struct {
		name    string
		handler http.Handler
		key     func() string
	}{
		{"bare-h2c-proxy", bare, func() string { return "" }},
		{"idemproxy/no-key", idem, func() string { return "" }},
		{"idemproxy/first-execution", idem, func() string { return fmt.Sprint("first-", keys.Add(1)) }},
		{"idemproxy/replay", idem, func() string { return fmt.Sprint("replay-", keys.Add(1)%256) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			conn := grpctest.Dial(b, serveH2C(b, c.handler), grpc.WithDisableRetry())
			msg := grpctest.Charge{RequestID: "bench-0123456789", Amount: 4200, Note: "a unary call of about fifty bytes"}
			for range 300 { // warm up; the replay row's keys stored
				if r := grpctest.Call(context.Background(), conn, grpctest.Create, msg, c.key()); r.Err != nil {
					b.Fatal(r.Err)
				}
			}
			b.SetParallelism(16) // 32 calls in flight on 2 cores
			b.ReportAllocs()
			cpu0 := cpuTime()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if r := grpctest.Call(context.Background(), conn, grpctest.Create, msg, c.key()); r.Err != nil {
						b.Error(r.Err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// serveH2C serves h on a loopback listener, HTTP/1.1 and h2c, as the proxy's
// plain listener does, until the benchmark ends.
func serveH2C(b *testing.B, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: h, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
