package caddymodule

import (
	"strings"
	"testing"
)

// The admin API picks the handler by name, the newest config's first; with
// one store any handler serves, with more the caller must name one.
func TestAdminPicksTheHandler(t *testing.T) {
	var g handlerRegistry
	if _, err := g.pick(""); err == nil {
		t.Fatal("no handler: picked one")
	}
	oldA := &Handler{Name: "a", storeName: "memory"}
	newA := &Handler{Name: "a", storeName: "memory"}
	b := &Handler{Name: "b", storeName: "memory"}
	g.add(oldA)
	g.add(b)
	g.add(newA) // a reload's: provisioned before the old config's cleanup
	if h, _ := g.pick("a"); h != newA {
		t.Fatal("by name: not the newest config's")
	}
	if h, err := g.pick(""); err != nil || h != newA {
		t.Fatalf("one store, no name: %v", err)
	}
	g.remove(oldA)
	g.add(&Handler{Name: "r", storeName: "redis redis://127.0.0.1:6379"})
	if _, err := g.pick(""); err == nil || !strings.Contains(err.Error(), "?handler=NAME") {
		t.Fatalf("two stores, no name: %v; want to be told to name one", err)
	}
	if _, err := g.pick("c"); err == nil || !strings.Contains(err.Error(), `"a" (memory)`) {
		t.Fatalf("an unknown name: %v; want the handlers listed", err)
	}
	if got := len(g.list()); got != 3 {
		t.Fatalf("list: %d handlers, want 3", got)
	}
}
