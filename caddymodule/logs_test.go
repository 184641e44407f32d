package caddymodule

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// The handler's lines write durations as Go does (Caddy's encoder wrote
// unknown_hold as 86400), given as attributes, with the logger's own, or in
// a group, and carry the path, request id and client of the request they
// are about, read when the handler began; a line about no request has none.
func TestModuleLoggerLines(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(lineHandler{slog.NewJSONHandler(&buf, nil)}).With("lease", 30*time.Second)
	r := httptest.NewRequest("POST", "http://example.com/charges/7?token=secret", nil)
	r.RemoteAddr = "192.0.2.7:4711"
	extra := new(caddyhttp.ExtraLogFields)
	ctx := context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{caddyhttp.ClientIPVarKey: "198.51.100.9"})
	r = r.WithContext(context.WithValue(ctx, caddyhttp.ExtraLogFieldsCtxKey, extra))
	repl := caddyhttp.NewTestReplacer(r)
	r = withRequestLog(r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl)), repl)
	uuid, _ := repl.GetString("http.request.uuid")
	log.LogAttrs(r.Context(), slog.LevelWarn, "held", slog.Duration("unknown_hold", 24*time.Hour),
		slog.Group("g", slog.Duration("d", 1500*time.Millisecond)))
	log.Info("no request", "took", time.Millisecond)

	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) != 2 {
		t.Fatalf("%d lines: %s", len(lines), buf.String())
	}
	var held map[string]any
	if err := json.Unmarshal(lines[0], &held); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"unknown_hold": "24h0m0s", "lease": "30s", "path": "/charges/7", "client": "198.51.100.9"}
	for k, v := range want {
		if held[k] != v {
			t.Errorf("%s: %v, want %v (%s)", k, held[k], v, lines[0])
		}
	}
	if held["request_id"] != uuid || uuid == "" {
		t.Errorf("request_id %v, want Caddy's {http.request.uuid} %q", held["request_id"], uuid)
	}
	if g, _ := held["g"].(map[string]any); g["d"] != "1.5s" {
		t.Errorf("a duration in a group: %v, want 1.5s", held["g"])
	}
	var other map[string]any
	if err := json.Unmarshal(lines[1], &other); err != nil {
		t.Fatal(err)
	}
	if other["took"] != "1ms" || other["path"] != nil || other["client"] != nil {
		t.Errorf("a line about no request: %s", lines[1])
	}
}
