package conformance

import (
	"os"
	"strings"
	"testing"
)

// docs/conformance.md has a row for every check, and its strict and draft
// columns say what the checks' levels make them.
func TestDocsTableMatchesChecks(t *testing.T) {
	text, err := os.ReadFile("../docs/conformance.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(string(text), "\n") {
		cells := strings.Split(line, " | ")
		if len(cells) == 6 && strings.HasPrefix(cells[0], "| `") {
			rows[strings.Trim(cells[0], "|` ")] = cells
		}
	}
	word := func(required bool) string {
		if required {
			return "required"
		}
		return "advisory"
	}
	for _, c := range checks {
		cells, ok := rows[c.id]
		if !ok {
			t.Errorf("docs/conformance.md has no row for %s", c.id)
			continue
		}
		strictCol, draftCol := cells[4], strings.TrimSuffix(cells[5], " |")
		if want := word(c.required(Config{Level: Strict})); !strings.HasPrefix(strictCol, want) {
			t.Errorf("%s: strict column %q, want %s", c.id, strictCol, want)
		}
		if want := word(c.required(Config{Level: Draft})); !strings.HasPrefix(draftCol, want) {
			t.Errorf("%s: draft column %q, want %s", c.id, draftCol, want)
		}
	}
	if len(rows) != len(checks) {
		t.Errorf("docs/conformance.md has %d check rows, the suite %d checks", len(rows), len(checks))
	}
}
