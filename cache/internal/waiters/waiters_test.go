package waiters

import "testing"

func TestNotifyWakesEveryWaiterOfItsKeyOnly(t *testing.T) {
	var r Registry[string]
	a1, _ := r.Subscribe("a")
	a2, _ := r.Subscribe("a")
	b, cancelB := r.Subscribe("b")
	r.Notify("a")
	for i, ch := range []<-chan struct{}{a1, a2} {
		select {
		case <-ch:
		default:
			t.Fatalf("waiter %d of a not woken", i)
		}
	}
	select {
	case <-b:
		t.Fatal("b woken by a's change")
	default:
	}
	cancelB()
	r.Notify("b") // no waiter left: nothing to close twice
	if r.n.Load() != 0 || len(r.m) != 0 {
		t.Fatalf("registry not empty: %d keys, %v", r.n.Load(), r.m)
	}
}

func TestCancelAfterNotifyIsHarmless(t *testing.T) {
	var r Registry[int]
	_, cancel := r.Subscribe(1)
	r.Notify(1)
	cancel()
	if r.n.Load() != 0 {
		t.Fatalf("count %d after notify and cancel", r.n.Load())
	}
}
