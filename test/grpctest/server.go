package grpctest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"
)

// Server is the Payments service. Each call to Create, Watch and Upload, and
// each message of Chat, is one execution, counted by the request id of its
// (first) message. A Create answers with header metadata x-execution (the
// count, this one included) and x-seal-bin (binary), and trailer metadata
// x-ledger and x-receipt-bin, and does what its behavior says:
//
//	""            answer at once
//	"slow:300ms"  wait that long, then answer
//	"hang"        never answer (until the call's context ends)
//	"fail:CODE"   answer the status CODE (a number), with a message and a
//	              detail, after the header metadata
//	"reject:CODE" the same before any metadata: a trailers-only answer
type Server struct {
	// Started, when set, is called when an execution starts, before it
	// answers; it may block (a test's hold on the call).
	Started func(Charge)

	total atomic.Int64
	mu    sync.Mutex
	byID  map[string]int64
}

// Executions is how many executions the request id had.
func (s *Server) Executions(id string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[id]
}

// Total is how many executions there were.
func (s *Server) Total() int64 { return s.total.Load() }

// execute counts one execution of c and returns its number, the server's
// total (the Receipt's Execution).
func (s *Server) execute(c Charge) int64 {
	s.mu.Lock()
	if s.byID == nil {
		s.byID = map[string]int64{}
	}
	s.byID[c.RequestID]++
	s.mu.Unlock()
	n := s.total.Add(1)
	if s.Started != nil {
		s.Started(c)
	}
	return n
}

func (s *Server) create(ctx context.Context, c Charge) (*Receipt, error) {
	n := s.execute(c)
	if code, ok := strings.CutPrefix(c.Behavior, "reject:"); ok {
		return nil, statusOf(code, n) // no header sent: a trailers-only answer
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-execution", strconv.FormatInt(n, 10),
		"x-seal-bin", string([]byte{0, 1, 0xfe, byte(n)})))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-ledger", fmt.Sprintf("entry-%d; amount=%d", n, c.Amount),
		"x-receipt-bin", string([]byte{0xff, 0, byte(n)})))
	switch b := c.Behavior; {
	case strings.HasPrefix(b, "slow:"):
		d, err := time.ParseDuration(strings.TrimPrefix(b, "slow:"))
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	case b == "hang":
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	case strings.HasPrefix(b, "fail:"):
		return nil, statusOf(strings.TrimPrefix(b, "fail:"), n)
	}
	return &Receipt{ID: fmt.Sprintf("ch_%s_%d", c.RequestID, n), Amount: c.Amount, Execution: n}, nil
}

// statusOf is the error of a call asked to fail with code, a number, in its
// execution n: with a message and a detail (grpc-status-details-bin).
func statusOf(code string, n int64) error {
	c, err := strconv.Atoi(code)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	st, err := status.New(codes.Code(c), fmt.Sprintf("failed as asked, execution %d: 100%% ünïcode", n)).
		WithDetails(&errdetails.ErrorInfo{Reason: "ASKED", Domain: "idemtest", Metadata: map[string]string{"execution": strconv.FormatInt(n, 10)}})
	if err != nil {
		return err
	}
	return st.Err()
}

// Desc is the service's description, written by hand.
var Desc = grpc.ServiceDesc{
	ServiceName: Service,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Create", Handler: unary(func(s *Server, ctx context.Context, c Charge) (*Receipt, error) { return s.create(ctx, c) })},
		{MethodName: "Count", Handler: unary(func(s *Server, _ context.Context, c Charge) (*Receipt, error) {
			return &Receipt{ID: c.RequestID, Amount: s.Total(), Execution: s.Executions(c.RequestID)}, nil
		})},
	},
	Streams: []grpc.StreamDesc{
		{StreamName: "Watch", ServerStreams: true, Handler: func(srv any, st grpc.ServerStream) error {
			in := dynamicpb.NewMessage(ChargeDesc)
			if err := st.RecvMsg(in); err != nil {
				return err
			}
			c := ChargeOf(in)
			n := srv.(*Server).execute(c)
			for i := range int64(3) {
				if err := st.SendMsg(Receipt{ID: fmt.Sprintf("w_%s_%d", c.RequestID, i), Amount: c.Amount, Execution: n}.Message()); err != nil {
					return err
				}
			}
			st.SetTrailer(metadata.Pairs("x-ledger", fmt.Sprintf("watch-%d", n)))
			return nil
		}},
		{StreamName: "Upload", ClientStreams: true, Handler: func(srv any, st grpc.ServerStream) error {
			var first Charge
			var sum, msgs int64
			for {
				in := dynamicpb.NewMessage(ChargeDesc)
				err := st.RecvMsg(in)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return err
				}
				c := ChargeOf(in)
				if msgs == 0 {
					first = c
				}
				sum += c.Amount
				msgs++
			}
			n := srv.(*Server).execute(first)
			return st.SendMsg(Receipt{ID: fmt.Sprintf("u_%s_%d", first.RequestID, msgs), Amount: sum, Execution: n}.Message())
		}},
		{StreamName: "Chat", ServerStreams: true, ClientStreams: true, Handler: func(srv any, st grpc.ServerStream) error {
			for {
				in := dynamicpb.NewMessage(ChargeDesc)
				err := st.RecvMsg(in)
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				c := ChargeOf(in)
				n := srv.(*Server).execute(c)
				if err := st.SendMsg(Receipt{ID: "c_" + c.RequestID, Amount: c.Amount, Execution: n}.Message()); err != nil {
					return err
				}
			}
		}},
	},
}

// unary adapts a method of Server to a grpc.MethodDesc handler.
func unary(f func(*Server, context.Context, Charge) (*Receipt, error)) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		in := dynamicpb.NewMessage(ChargeDesc)
		if err := dec(in); err != nil {
			return nil, err
		}
		r, err := f(srv.(*Server), ctx, ChargeOf(in))
		if err != nil {
			return nil, err
		}
		return r.Message(), nil
	}
}

// Serve serves s on ln (cleartext HTTP/2, as grpc-go serves without
// credentials) until the returned server is stopped.
func (s *Server) Serve(ln net.Listener, opts ...grpc.ServerOption) *grpc.Server {
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&Desc, s)
	go func() { _ = srv.Serve(ln) }()
	return srv
}
