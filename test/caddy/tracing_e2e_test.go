package caddy_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/tracing/otlptest"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// Inside real Caddy with its own tracing directive on, exporting OTLP to a
// receiver the test runs: the module puts the idempotency attributes on the
// span of Caddy's tracing handler (no second tracer), and the replay's span
// links to the first execution's.
func TestCaddyTracingDirective(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	rc := otlptest.NewReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rc.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		fmt.Fprint(w, r.Header.Get("Traceparent"))
	}))
	defer up.Close()
	dir := t.TempDir()
	cfg := fmt.Sprintf(globalOptions(dir)+":0 {\n\ttracing {\n\t\tspan idem-site\n\t}\n\tidempotency\n\trespond /healthz 200\n\treverse_proxy %s\n}\n",
		strings.TrimPrefix(up.URL, "http://"))
	path := filepath.Join(dir, "Caddyfile")
	os.WriteFile(path, []byte(cfg), 0o644)
	p := runCaddy(t, caddyBinary(t), dir, path)

	a, b := p.Post(t, "/pay", "k1", "a"), p.Post(t, "/pay", "k1", "a")
	code, first, code2, again, replayed := a.Status, a.Body, b.Status, b.Body, b.Replayed
	if code != 201 || code2 != 201 || !replayed || again != first || !strings.HasPrefix(first, "00-") {
		t.Fatalf("first %d %q, again %d %q replayed=%v", code, first, code2, again, replayed)
	}
	var stored, replay *tracepb.Span
	testutil.Eventually(t, 15*time.Second, "the spans of both requests", func() bool {
		stored, replay = nil, nil
		for _, s := range rc.Spans() {
			switch otlptest.Attr(s, "idempotency.outcome").GetStringValue() {
			case "stored":
				stored = s
			case "replayed":
				replay = s
			}
		}
		return stored != nil && replay != nil
	})
	if stored.Name != "idem-site" || replay.Name != "idem-site" {
		t.Errorf("the attributes are on spans %q and %q, want Caddy's tracing span idem-site", stored.Name, replay.Name)
	}
	if !otlptest.Attr(replay, "idempotency.replayed").GetBoolValue() || len(otlptest.Attr(stored, "idempotency.key_hash").GetStringValue()) != 12 {
		t.Errorf("attributes: stored %v replay %v", stored.Attributes, replay.Attributes)
	}
	if len(replay.Links) != 1 || !bytes.Equal(replay.Links[0].SpanId, stored.SpanId) {
		t.Errorf("replay links %v, want one to %x", replay.Links, stored.SpanId)
	}
	// The upstream got the traceparent of the first execution's trace.
	if !strings.Contains(first, fmt.Sprintf("%x", stored.TraceId)) {
		t.Errorf("upstream traceparent %q is not in trace %x", first, stored.TraceId)
	}
}
