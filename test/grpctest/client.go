package grpctest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// RetryPolicy is a service config that turns grpc-go's retry policy on for
// every method of the service: UNAVAILABLE is retried, up to 5 attempts, with
// a short backoff (a server's grpc-retry-pushback-ms replaces it).
const RetryPolicy = `{"methodConfig":[{"name":[{"service":"` + Service + `"}],` +
	`"retryPolicy":{"maxAttempts":5,"initialBackoff":"0.02s","maxBackoff":"0.2s","backoffMultiplier":2,` +
	`"retryableStatusCodes":["UNAVAILABLE"]}}]}`

// Dial is a client of addr over cleartext HTTP/2 with prior knowledge (what
// insecure credentials dial), its retry policy on, its messages in Codec, its
// :authority testutil.LoadBalancedHost (a key's scope has the Host: as behind
// a load balancer, every instance sees the same); it is closed when the test
// ends.
func Dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(RetryPolicy),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(Codec{})),
		grpc.WithAuthority(testutil.LoadBalancedHost), // the same Host whichever instance it reaches
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Result is a unary call as its client saw it.
type Result struct {
	Receipt Receipt
	Err     error      // nil, or the call's status error
	Code    codes.Code // OK, or the status code
	Message string     // the status message
	Header  metadata.MD
	Trailer metadata.MD
}

// String is how a test failure shows r.
func (r Result) String() string {
	return fmt.Sprintf("code=%v message=%q receipt=%+v header=%v trailer=%v", r.Code, r.Message, r.Receipt, r.Header, r.Trailer)
}

// Call makes one unary call of method with c, the key in the idempotency-key
// metadata when key is not empty.
func Call(ctx context.Context, conn *grpc.ClientConn, method string, c Charge, key string, opts ...grpc.CallOption) Result {
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
	}
	var r Result
	out := NewReceipt()
	r.Err = conn.Invoke(ctx, method, c.Message(), out, append([]grpc.CallOption{grpc.Header(&r.Header), grpc.Trailer(&r.Trailer)}, opts...)...)
	st := status.Convert(r.Err)
	r.Code, r.Message = st.Code(), st.Message()
	if r.Err == nil {
		r.Receipt = ReceiptOf(out)
	}
	return r
}

// Raw is a message as its bytes, sent as they are (a client that encodes a
// message its own way).
type Raw []byte

// Codec is protobuf as a client that encodes a message the same way each time
// (deterministic marshaling: Go's protobuf writes a dynamic message's fields
// in an order that varies from one encoding to the next otherwise), and Raw
// as it is. Subtype is the content subtype: "" sends application/grpc,
// "proto" application/grpc+proto.
type Codec struct{ Subtype string }

// Marshal implements encoding.Codec.
func (Codec) Marshal(v any) ([]byte, error) {
	switch m := v.(type) {
	case Raw:
		return m, nil
	case proto.Message:
		return proto.MarshalOptions{Deterministic: true}.Marshal(m)
	}
	return nil, fmt.Errorf("grpctest.Codec: cannot encode %T", v)
}

// Unmarshal implements encoding.Codec.
func (Codec) Unmarshal(data []byte, v any) error {
	switch m := v.(type) {
	case *Raw:
		*m = append(Raw(nil), data...)
		return nil
	case proto.Message:
		return proto.Unmarshal(data, m)
	}
	return fmt.Errorf("grpctest.Codec: cannot decode into %T", v)
}

// Name implements encoding.Codec.
func (c Codec) Name() string { return c.Subtype }

// Start serves s on a loopback port until the test ends and returns its
// address. Set s.Started before: it is read by the server's goroutines.
func Start(t testing.TB, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := s.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// StartProcess runs the service as a process of its own (bin: grpcupstream,
// built with testutil.Build), on a port it picks, killed when the test ends;
// it returns the process and its address.
func StartProcess(t testing.TB, bin string) (*testutil.Proc, string) {
	t.Helper()
	p := testutil.Start(t, bin, []string{"-listen", "127.0.0.1:0"})
	var addr string
	testutil.Eventually(t, 15*time.Second, "grpcupstream to listen", func() bool {
		for _, line := range strings.Split(p.Logs.String(), "\n") {
			if a, ok := strings.CutPrefix(line, "listening "); ok {
				addr = strings.TrimSpace(a)
				return true
			}
		}
		return false
	})
	p.Addr = addr
	return p, addr
}

// Executions asks the server at conn how many executions the request id had.
func Executions(t testing.TB, conn *grpc.ClientConn, id string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r := Call(ctx, conn, Count, Charge{RequestID: id}, "")
	if r.Err != nil {
		t.Fatalf("counting executions: %v", r.Err)
	}
	return r.Receipt.Execution
}
