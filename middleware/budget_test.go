package middleware

import (
	"testing"
	"time"
)

// Reservations add up to the size and no further; what was given back can be
// taken again.
func TestBudgetTakeAndGive(t *testing.T) {
	b := &budget{size: 100, free: func() {}}
	if !b.take(60) || !b.take(40) || b.take(1) {
		t.Fatal("100 bytes: 60 and 40 fit, then nothing")
	}
	h := reservation{b: b}
	b.give(40)
	if !h.grow(30) || !h.grow(10) || h.grow(1) {
		t.Fatal("a hold grows into what was given back, and no further")
	}
	h.release()
	h.release() // twice is once
	if got := b.used.Load(); got != 60 {
		t.Fatalf("in use %d, want 60", got)
	}
	b.give(60)
	if got := b.used.Load(); got != 0 {
		t.Fatalf("in use %d, want 0", got)
	}
}

// When the bodies held fall back to none after a quarter of the budget or more
// was in use, the freed memory is returned to the operating system a second
// later, at most once a minute; smaller peaks return nothing.
func TestBudgetReturnsMemoryAfterABurst(t *testing.T) {
	freed := make(chan time.Time, 4)
	b := &budget{size: 100, free: func() { freed <- time.Now() }}
	b.take(10)
	b.give(10)
	b.take(30)
	b.take(20)
	b.give(30) // 20 still held
	select {
	case <-freed:
		t.Fatal("memory returned while bodies are held")
	case <-time.After(returnDelay + 300*time.Millisecond):
	}
	fell := time.Now()
	b.give(20)
	select {
	case at := <-freed:
		if d := at.Sub(fell); d < returnDelay-50*time.Millisecond {
			t.Fatalf("returned %v after the bodies fell to none, want %v", d, returnDelay)
		}
	case <-time.After(returnDelay + 2*time.Second):
		t.Fatal("memory not returned after a burst of half the budget")
	}
	// Another burst within the minute waits for it.
	b.take(50)
	b.give(50)
	select {
	case <-freed:
		t.Fatal("memory returned twice within a minute")
	case <-time.After(returnDelay + 300*time.Millisecond):
	}
	b.mu.Lock()
	pending := b.pending
	b.mu.Unlock()
	if !pending {
		t.Fatal("the second burst's return is not scheduled")
	}
	// A small peak after a return schedules nothing.
	c := &budget{size: 100, free: func() { freed <- time.Now() }}
	c.take(24)
	c.give(24)
	c.mu.Lock()
	pending = c.pending
	c.mu.Unlock()
	if pending {
		t.Fatal("a peak below a quarter of the budget scheduled a return")
	}
}
