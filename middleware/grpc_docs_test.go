package middleware

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// docs/grpc.md's tables are the code's: each problem's gRPC code, and each
// grpc-status's HTTP status and whether the default store_statuses store it.
func TestGRPCDocsTables(t *testing.T) {
	doc := testutil.Docs(t, "docs/grpc.md")
	rows := map[string][]string{}
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows[strings.Trim(cells[0], "`")] = cells
	}
	problems := []string{"missing-key", "invalid-key", "body-unreadable", "body-malformed", "non-canonical-path",
		"invalid-host", "upgrade-refused", "invalid-signature", "body-too-large", "mismatch", "not-acceptable",
		"not-replayable", "in-flight", "store-unavailable", "overloaded", "outcome-unknown"}
	for _, name := range problems {
		c := grpcCodeOf(Problem{Type: ProblemTypeBase + name})
		want := fmt.Sprintf("`%s` (%d)", c, c)
		if r := rows[name]; len(r) < 3 || r[2] != want {
			t.Errorf("docs/grpc.md, %s: %q, the code says %s", name, r, want)
		}
	}
	up := grpcCodeOf(Problem{Type: ProblemTypeBase + "upstream-unavailable", Status: 502, Retryable: true})
	if r := rows["upstream-unavailable"]; len(r) < 3 || r[2] != fmt.Sprintf("`%s` (%d)", up, up) {
		t.Errorf("docs/grpc.md, upstream-unavailable: %q", r)
	}
	stored := defaultStoreStatuses()
	for c := grpcOK; c <= grpcUnauthenticated; c++ {
		r := rows[c.String()+"` ("+fmt.Sprint(int(c))+")"]
		if r == nil {
			r = rows[c.String()]
		}
		want := []string{fmt.Sprint(c.httpStatus()), map[bool]string{true: "stored", false: "released"}[stored.Has(c.httpStatus())]}
		if len(r) < 3 || r[1] != want[0] || r[2] != want[1] {
			t.Errorf("docs/grpc.md, grpc-status %s: %q, want %v", c, r, want)
		}
	}
}
