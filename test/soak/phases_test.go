package main

import (
	"strings"
	"testing"
)

// SOAK_PHASES picks phases by name, in the order they run; a name that is no
// phase is refused, naming the phases, instead of a soak that runs nothing and
// passes.
func TestPickPhases(t *testing.T) {
	all, err := pickPhases("")
	if err != nil || len(all) != len(phases) {
		t.Fatalf("no spec: %d phases, %v; want all %d", len(all), err, len(phases))
	}
	got, err := pickPhases("postgres, main")
	if err != nil || len(got) != 2 || got[0].name != "main" || got[1].name != "postgres" {
		t.Fatalf("postgres, main: %v, %v", got, err)
	}
	if _, err := pickPhases("main,failvoer"); err == nil || !strings.Contains(err.Error(), `"failvoer"`) ||
		!strings.Contains(err.Error(), "reconcile") {
		t.Fatalf("a misspelt phase: %v, want an error naming it and the phases", err)
	}
}
