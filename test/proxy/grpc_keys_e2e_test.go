package proxy_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/test/grpctest"
)

// chargeBytes is a Charge's message with request_id and amount, in the order
// given: a client library of its own may write fields in any order.
func chargeBytes(id string, amount uint64, idFirst bool) grpctest.Raw {
	var b []byte
	idField := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), id)
	amountField := protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), amount)
	if idFirst {
		b = append(append(b, idField...), amountField...)
	} else {
		b = append(append(b, amountField...), idField...)
	}
	return b
}

// rawCall makes a unary call of msg as its bytes.
func rawCall(t *testing.T, conn *grpc.ClientConn, msg grpctest.Raw, opts ...grpc.CallOption) (codes.Code, string) {
	t.Helper()
	var out grpctest.Raw
	st := status.Convert(conn.Invoke(grpcCtx(t), grpctest.Create, msg, &out, opts...))
	return st.Code(), st.Message()
}

// The key in the request message (proto:N, AIP-155's request_id; proto:N.M,
// AEP-155's idempotency_key.key): no metadata needed. A message re-encoded
// in another field order is another request (the documented limit), a key
// field twice or a compressed message is refused, a message without the
// field passes through (or, under require_key, is refused).
func TestE2EGRPCKeyInTheMessage(t *testing.T) {
	skipShort(t)
	srv := &grpctest.Server{}
	addr := grpctest.Start(t, srv)
	ctx := grpcCtx(t)
	p := start(t, "--upstream", "h2c://"+addr, "--key-source", "proto:1")
	conn := grpctest.Dial(t, p.Addr, noRetry)
	a := grpctest.Call(ctx, conn, grpctest.Create, grpctest.Charge{RequestID: "aip-1", Amount: 5}, "")
	b := grpctest.Call(ctx, conn, grpctest.Create, grpctest.Charge{RequestID: "aip-1", Amount: 5}, "")
	if a.Code != codes.OK || b.Receipt != a.Receipt || first(b.Header, "idempotent-replayed") != "true" || srv.Executions("aip-1") != 1 {
		t.Fatalf("request_id as the key: %v\n%v", a, b)
	}
	if r := grpctest.Call(ctx, conn, grpctest.Create, grpctest.Charge{RequestID: "aip-2", Amount: 5}, ""); r.Code != codes.OK || srv.Executions("aip-2") != 1 {
		t.Fatalf("another request_id: %v", r)
	}
	if code, msg := rawCall(t, conn, chargeBytes("order", 9, true)); code != codes.OK {
		t.Fatalf("fields in number order: %v %s", code, msg)
	}
	if code, msg := rawCall(t, conn, chargeBytes("order", 9, true)); code != codes.OK || srv.Executions("order") != 1 {
		t.Fatalf("the same bytes again: %v %s, %d executions", code, msg, srv.Executions("order"))
	}
	if code, msg := rawCall(t, conn, chargeBytes("order", 9, false)); code != codes.FailedPrecondition || srv.Executions("order") != 1 {
		t.Fatalf("the same fields in another order: %v %s; want FAILED_PRECONDITION (bytes differ)", code, msg)
	}
	twice := append(chargeBytes("x", 1, true), chargeBytes("y", 1, true)...)
	if code, msg := rawCall(t, conn, twice); code != codes.InvalidArgument || !strings.Contains(msg, "appears twice") {
		t.Fatalf("request_id twice: %v %s", code, msg)
	}
	if r := grpctest.Call(ctx, conn, grpctest.Create, grpctest.Charge{RequestID: "gz"}, "", grpc.UseCompressor(gzip.Name)); r.Code != codes.InvalidArgument ||
		!strings.Contains(r.Message, "compressed") || srv.Executions("gz") != 0 {
		t.Fatalf("a compressed message: %v", r)
	}
	for range 2 {
		if r := grpctest.Call(ctx, conn, grpctest.Create, grpctest.Charge{Amount: 1, Note: "no id"}, ""); r.Code != codes.OK {
			t.Fatalf("no request_id: %v", r)
		}
	}
	if n := srv.Executions(""); n != 2 {
		t.Fatalf("no request_id, no key: %d executions, want 2 (passed through)", n)
	}

	q := start(t, "--upstream", "h2c://"+addr, "--key-source", "proto:3.1", "--require-key")
	qc := grpctest.Dial(t, q.Addr, noRetry)
	c := grpctest.Charge{RequestID: "aep", Key: "aep-key-1", FirstSent: 1700000000}
	a = grpctest.Call(ctx, qc, grpctest.Create, c, "")
	b = grpctest.Call(ctx, qc, grpctest.Create, c, "")
	if a.Code != codes.OK || first(b.Header, "idempotent-replayed") != "true" || srv.Executions("aep") != 1 {
		t.Fatalf("idempotency_key.key: %v\n%v", a, b)
	}
	if r := grpctest.Call(ctx, qc, grpctest.Create, grpctest.Charge{RequestID: "aep-none"}, ""); r.Code != codes.InvalidArgument ||
		problemOf(r) != "missing-key" || !strings.Contains(r.Message, "field 3.1 of its protobuf message") {
		t.Fatalf("no idempotency_key under require_key: %v", r)
	}
}

// A stream passes through untracked, key or not: a client stream (its second
// message tells), and a bidirectional one that waits for the server's answer
// before it sends more (tracked from the grace on, released when its second
// message comes). Each runs every time. A server stream sends one message and ends
// its side, as a unary call does: with a key it is tracked, its messages and
// trailers replayed.
func TestE2EGRPCStreams(t *testing.T) {
	skipShort(t)
	srv := &grpctest.Server{}
	p := start(t, "--upstream", "h2c://"+grpctest.Start(t, srv))
	conn := grpctest.Dial(t, p.Addr, noRetry)
	keyed := func(key string) context.Context {
		return metadata.AppendToOutgoingContext(grpcCtx(t), "idempotency-key", key)
	}
	ctx := keyed("k-up")
	for range 2 {
		st, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, grpctest.Upload)
		if err != nil {
			t.Fatal(err)
		}
		for _, amount := range []int64{1, 2, 3} {
			if err := st.SendMsg(grpctest.Charge{RequestID: "up", Amount: amount}.Message()); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		out := grpctest.NewReceipt()
		if err := st.RecvMsg(out); err != nil || grpctest.ReceiptOf(out).Amount != 6 {
			t.Fatalf("client stream: %v %+v", err, grpctest.ReceiptOf(out))
		}
	}
	if n := srv.Executions("up"); n != 2 {
		t.Fatalf("client stream: %d executions, want 2 (untracked)", n)
	}
	ctx = keyed("k-chat")
	for range 2 {
		st, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, grpctest.Chat)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"chat", "chat-2"} {
			if err := st.SendMsg(grpctest.Charge{RequestID: id}.Message()); err != nil {
				t.Fatal(err)
			}
			out := grpctest.NewReceipt() // the answer before the next message
			if err := st.RecvMsg(out); err != nil || grpctest.ReceiptOf(out).ID != "c_"+id {
				t.Fatalf("bidirectional stream: %v %+v", err, grpctest.ReceiptOf(out))
			}
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if err := st.RecvMsg(grpctest.NewReceipt()); !errors.Is(err, io.EOF) {
			t.Fatalf("bidirectional stream's end: %v", err)
		}
	}
	if n := srv.Executions("chat"); n != 2 {
		t.Fatalf("bidirectional stream: %d executions, want 2 (untracked)", n)
	}
	ctx = keyed("k-watch")
	var first []string
	for i := range 2 {
		st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, grpctest.Watch)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SendMsg(grpctest.Charge{RequestID: "watch", Amount: 4}.Message()); err != nil {
			t.Fatal(err)
		}
		_ = st.CloseSend()
		var got []string
		for {
			out := grpctest.NewReceipt()
			if err := st.RecvMsg(out); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			got = append(got, grpctest.ReceiptOf(out).ID)
		}
		got = append(got, st.Trailer().Get("x-ledger")...)
		if i == 0 {
			first = got
		} else if strings.Join(got, " ") != strings.Join(first, " ") {
			t.Fatalf("server stream replayed: %v, first %v", got, first)
		}
	}
	if n := srv.Executions("watch"); n != 1 || len(first) != 4 {
		t.Fatalf("server stream: %d executions, %v", n, first)
	}
}

// One listener serves HTTP/1.1 and cleartext HTTP/2 (prior knowledge) side
// by side, and one route serves gRPC, gRPC-Web and Connect calls: gRPC-Web
// and Connect over HTTP/1.1 are plain HTTP (replayed; their errors HTTP
// statuses in the route's error format), a gRPC call gets gRPC's shape.
func TestE2EGRPCWebAndConnectStayHTTP(t *testing.T) {
	skipShort(t)
	srv := &grpctest.Server{}
	gs := grpc.NewServer(grpc.ForceServerCodec(grpctest.Codec{}))
	gs.RegisterService(&grpctest.Desc, srv)
	var web atomic.Int64
	mux := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") && !strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc-web") {
			gs.ServeHTTP(w, r) // a gRPC call
			return
		}
		n := web.Add(1)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc-web") {
			trailer := "grpc-status:0\r\nx-ledger:web-" + string(rune('0'+n)) + "\r\n"
			_, _ = w.Write(append(append(body, 0x80, 0, 0, 0, byte(len(trailer))), trailer...)) // the message echoed, then its trailers
			return
		}
		_, _ = w.Write(body) // Connect unary: the message echoed
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: mux, Protocols: new(http.Protocols)}
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { hs.Close() })

	p := start(t, "--upstream", "h2c://"+ln.Addr().String(), "--key-source", "proto:1")
	webMsg, connectMsg := string(chargeBytes("web-1", 3, true)), string(chargeBytes("connect-1", 3, true))
	frame := func(m string) string { return string([]byte{0, 0, 0, 0, byte(len(m))}) + m }
	send := func(ct, body string) testutil.Response {
		return p.Send(t, testutil.Request{Target: grpctest.Create, Host: testutil.LoadBalancedHost, Body: body,
			Header: map[string]string{"Content-Type": ct, "X-Grpc-Web": "1"}})
	}
	for _, c := range []struct{ ct, body, other string }{
		{"application/grpc-web+proto", frame(webMsg), frame(webMsg + "\x10\x04")},
		{"application/proto", connectMsg, connectMsg + "\x10\x04"},
	} {
		a, b := send(c.ct, c.body), send(c.ct, c.body)
		if a.Status != 200 || b.Status != 200 || !b.Replayed || a.Body != b.Body || b.Header.Get("Content-Type") != c.ct {
			t.Fatalf("%s over HTTP/1.1: %+v\n%+v", c.ct, a, b)
		}
		if r := send(c.ct, c.other); r.Status != 422 || !strings.Contains(r.Body, "mismatch") || r.Header.Get("Grpc-Status") != "" {
			t.Fatalf("%s, the key reused: %+v; want a 422 problem", c.ct, r)
		}
	}
	if n := web.Load(); n != 2 {
		t.Fatalf("the upstream ran %d gRPC-Web and Connect calls, want 2", n)
	}
	conn := grpctest.Dial(t, p.Addr, noRetry)
	if code, _ := rawCall(t, conn, chargeBytes("grpc-1", 3, true)); code != codes.OK {
		t.Fatalf("a gRPC call on the same listener: %v", code)
	}
	if code, _ := rawCall(t, conn, chargeBytes("grpc-1", 4, true)); code != codes.FailedPrecondition {
		t.Fatalf("a gRPC call, the key reused: %v", code)
	}
}

// Over TLS the listener offers HTTP/2 by ALPN: a gRPC client with TLS
// credentials calls through it, replayed as over h2c.
func TestE2EGRPCOverTLS(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeCert(t, cert, key, "grpc")
	srv := &grpctest.Server{}
	p := start(t, "--upstream", "h2c://"+grpctest.Start(t, srv), "--tls-cert", cert, "--tls-key", key)
	conn := grpctest.Dial(t, p.Addr, noRetry, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})))
	ctx := grpcCtx(t)
	c := grpctest.Charge{RequestID: "tls", Amount: 1}
	a, b := grpctest.Call(ctx, conn, grpctest.Create, c, "k-tls"), grpctest.Call(ctx, conn, grpctest.Create, c, "k-tls")
	if a.Code != codes.OK || first(b.Header, "idempotent-replayed") != "true" || b.Receipt != a.Receipt || srv.Executions("tls") != 1 {
		t.Fatalf("over TLS: %v\n%v", a, b)
	}
}
