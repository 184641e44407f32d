package caddymodule

import (
	"context"
	"fmt"
	"log/slog"

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

// moduleLogger is the handler's logger: Caddy's, but for what a log_append
// directive adds to the request (caddyhttp.ExtraLogFields). Caddy logs an
// error with a stack trace when those are in the request's context (its
// handler for them forgets that module loggers take none), and a store
// outage would log a 2 KB stack with every 503.
func moduleLogger(ctx caddy.Context) *slog.Logger {
	return slog.New(withoutExtraFields{ctx.Slogger().Handler()})
}

type withoutExtraFields struct{ slog.Handler }

func (h withoutExtraFields) Handle(ctx context.Context, r slog.Record) error {
	return h.Handler.Handle(context.WithValue(ctx, caddyhttp.ExtraLogFieldsCtxKey, nil), r)
}

func (h withoutExtraFields) WithAttrs(attrs []slog.Attr) slog.Handler {
	return withoutExtraFields{h.Handler.WithAttrs(attrs)}
}

func (h withoutExtraFields) WithGroup(name string) slog.Handler {
	return withoutExtraFields{h.Handler.WithGroup(name)}
}
