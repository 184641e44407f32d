package proxy

import (
	"context"
	"io"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// NewLogger returns the slog logger the configuration asks for. Every line it
// writes, whoever logs it (the proxy, the core, the stores, net/http), has
// durations as durations ("24h0m0s", not nanoseconds) and the secrets of any
// URL in it redacted (Redact); a line logged under a request's context carries
// its client address, route, request id, and trace id when tracing is on.
func NewLogger(cfg *Config, w io.Writer) *slog.Logger {
	level, _ := parseLevel(cfg.LogLevel) // checked by Validate
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: replaceAttr}
	format := cfg.LogFormat
	if format == "auto" {
		format = "json"
		if f, ok := w.(*os.File); ok && isTerminal(f) {
			format = "text"
		}
	}
	var h slog.Handler = slog.NewJSONHandler(w, opts)
	if format == "text" {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(requestHandler{h})
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// replaceAttr writes a duration as text and redacts URLs in strings and errors.
func replaceAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindDuration:
		a.Value = slog.StringValue(a.Value.Duration().String())
	case slog.KindString:
		if s := a.Value.String(); strings.Contains(s, "://") {
			a.Value = slog.StringValue(Redact(s))
		}
	case slog.KindAny:
		if err, ok := a.Value.Any().(error); ok {
			a.Value = slog.StringValue(Redact(err.Error()))
		}
	}
	return a
}

// urlPattern finds what may be a URL in a text: a scheme and what follows up
// to a space or a quote.
var urlPattern = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>` + "`" + `]+`)

// secretParams are the query parameters whose values Redact hides: a name
// containing one of these words, in any case.
var secretParams = []string{"token", "secret", "password", "passwd", "pwd", "key", "auth", "signature", "sig", "credential"}

// Redact hides the secrets of every URL in text: the password of user:password@
// (also redis://:password@), and the values of query parameters named like a
// secret (token, access_token, api_key, password, signature…). It is applied to
// every log line and every error the command prints.
func Redact(text string) string {
	if !strings.Contains(text, "://") {
		return text
	}
	return urlPattern.ReplaceAllStringFunc(text, redactURL)
}

func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		// Unparsable (a bad port, a stray %): hide everything between the
		// scheme and an @, and keep the rest.
		scheme, rest, _ := strings.Cut(raw, "://")
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			return scheme + "://xxxxx@" + rest[at+1:]
		}
		return raw
	}
	changed := false
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
			changed = true
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		for name := range q {
			if secretParam(name) {
				q[name] = []string{"xxxxx"}
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
	}
	if !changed {
		return raw
	}
	return u.String()
}

func secretParam(name string) bool {
	name = strings.ToLower(name)
	for _, w := range secretParams {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// requestHandler adds, to a line logged under a request's context, what the
// proxy knows of the request (reqInfo): client, route, request_id; and the
// trace_id of the span in the context, when there is one.
type requestHandler struct{ slog.Handler }

func (h requestHandler) Handle(ctx context.Context, rec slog.Record) error {
	if info := infoOf(ctx); info != nil {
		rec.AddAttrs(slog.String("client", info.client), slog.String("request_id", info.requestID))
		if info.route != "" {
			rec.AddAttrs(slog.String("route", info.route))
		}
	}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		rec.AddAttrs(slog.String("trace_id", sc.TraceID().String()))
	}
	return h.Handler.Handle(ctx, rec)
}

func (h requestHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return requestHandler{h.Handler.WithAttrs(attrs)}
}

func (h requestHandler) WithGroup(name string) slog.Handler {
	return requestHandler{h.Handler.WithGroup(name)}
}
