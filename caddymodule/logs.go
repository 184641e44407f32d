package caddymodule

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/redis/go-redis/v9"
)

func init() {
	redis.SetLogger(redisLogger{}) // else go-redis writes its own lines to stderr
}

// redisLogger sends go-redis's own log lines (a pool that cannot dial, …) to
// Caddy's logger at debug level, as idemproxy does: the errors that matter
// reach the store's caller and are logged there.
type redisLogger struct{}

func (redisLogger) Printf(_ context.Context, format string, v ...any) {
	caddy.Log().Named("http.handlers.idempotency.stores.redis").Debug("redis: " + fmt.Sprintf(format, v...))
}

// moduleLogger is the handler's logger: Caddy's, with what the proxy's lines
// have that Caddy's logger does not give them:
//
//   - durations as Go writes them ("24h0m0s", as idemproxy logs them), where
//     Caddy's encoder writes seconds (86400);
//   - on a line about a request, its path, request_id and client
//     (requestLog), so that a held key's warning leads to the request in
//     Caddy's access log and the upstream's.
//
// It leaves out what a log_append directive adds to the request
// (caddyhttp.ExtraLogFields): Caddy logs an error with a stack trace when
// those are in the request's context (its handler for them forgets that
// module loggers take none), and a store outage would log a 2 KB stack with
// every 503.
func moduleLogger(ctx caddy.Context) *slog.Logger {
	return slog.New(lineHandler{ctx.Slogger().Handler()})
}

type lineHandler struct{ slog.Handler }

func (h lineHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(goDurations(a))
		return true
	})
	if info, _ := ctx.Value(requestLogKey{}).(*requestLog); info != nil {
		out.AddAttrs(slog.String("path", info.path))
		if info.requestID != "" {
			out.AddAttrs(slog.String("request_id", info.requestID))
		}
		out.AddAttrs(slog.String("client", info.client))
	}
	return h.Handler.Handle(context.WithValue(ctx, caddyhttp.ExtraLogFieldsCtxKey, nil), out)
}

func (h lineHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		out[i] = goDurations(a)
	}
	return lineHandler{h.Handler.WithAttrs(out)}
}

func (h lineHandler) WithGroup(name string) slog.Handler {
	return lineHandler{h.Handler.WithGroup(name)}
}

// goDurations writes the durations in a as Go writes them ("24h0m0s"), in
// groups too.
func goDurations(a slog.Attr) slog.Attr {
	a.Value = a.Value.Resolve()
	switch a.Value.Kind() {
	case slog.KindDuration:
		a.Value = slog.StringValue(a.Value.Duration().String())
	case slog.KindGroup:
		g := a.Value.Group()
		out := make([]slog.Attr, len(g))
		for i, x := range g {
			out[i] = goDurations(x)
		}
		a.Value = slog.GroupValue(out...)
	}
	return a
}

// requestLog is what the handler's lines about a request say of it: the
// path it came with (its query left out, which may carry secrets), Caddy's
// request id ({http.request.uuid}: Caddy's access log then carries it as
// uuid, and reverse_proxy can send it upstream with header_up), and the
// client's address (Caddy's client_ip, which its trusted_proxies decide).
// It is read once, on the request's goroutine, when the handler begins: the
// lines of the request's background work (a store retried, a claim renewed)
// come from other goroutines, which must not read Caddy's per-request maps.
type requestLog struct{ path, requestID, client string }

type requestLogKey struct{}

// withRequestLog is r with its requestLog in its context, for the lines the
// core logs under it.
func withRequestLog(r *http.Request, repl *caddy.Replacer) *http.Request {
	info := &requestLog{path: r.URL.Path}
	if ip, ok := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string); ok && ip != "" {
		info.client = ip
	} else if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		info.client = host
	} else {
		info.client = r.RemoteAddr
	}
	// Caddy makes the request id on first use, and notes it in the
	// request's access log fields, which a request Caddy's server did not
	// prepare lacks (then it has none).
	if extra, _ := r.Context().Value(caddyhttp.ExtraLogFieldsCtxKey).(*caddyhttp.ExtraLogFields); extra != nil {
		info.requestID, _ = repl.GetString("http.request.uuid")
	}
	return r.WithContext(context.WithValue(r.Context(), requestLogKey{}, info))
}
