package conformance

import (
	"fmt"
	"io"
	"strings"
)

// WriteText writes the report for a terminal: a line per check (its status,
// id, whether it is required, where the draft says so), what it saw, and the
// summary line "N passed, M failed".
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "conformance: POST %s (level %s, run %s)\n", r.Target, r.Level, r.Run)
	for _, res := range r.Results {
		need := "advisory"
		if res.Required {
			need = "required"
		}
		fmt.Fprintf(&b, "%-4s  %-16s  %-8s  %s — %s\n", res.Status, res.ID, need, res.Title, res.Section)
		fmt.Fprintf(&b, "      saw: %s\n", res.Saw)
	}
	fmt.Fprintf(&b, "%d passed, %d failed", r.Passed, r.Failed)
	if r.Skipped > 0 {
		fmt.Fprintf(&b, ", %d skipped", r.Skipped)
	}
	if r.OK {
		b.WriteString(": every required check passed\n")
	} else {
		var missed []string
		for _, res := range r.Results {
			if res.Required && res.Status != Pass {
				missed = append(missed, res.ID)
			}
		}
		fmt.Fprintf(&b, ": required checks not passed: %s\n", strings.Join(missed, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
