package cachetest

import (
	"context"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

func notifier(t *testing.T, h Harness) cache.Notifier {
	n, ok := h.Store.(cache.Notifier)
	if !ok {
		t.Skip("store does not implement cache.Notifier")
	}
	return n
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("no notification within 5s after %s", what)
	}
}

func testNotifyOnComplete(t *testing.T, h Harness) {
	n := notifier(t, h)
	key, other := Key(t, "k"), Key(t, "other")
	tok := claim(t, h.Store, key, "fp")
	otherTok := claim(t, h.Store, other, "fp")
	changed, cancel := n.Subscribe(key)
	defer cancel()
	_, cancelIdle := n.Subscribe(key) // a second waiter that gives up must not disturb the first
	cancelIdle()
	if err := h.Store.Complete(context.Background(), other, otherTok, completed(200, "x"), ttl); err != nil {
		t.Fatal(err)
	}
	if err := h.Store.Complete(context.Background(), key, tok, completed(200, "x"), ttl); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, changed, "Complete")
}

func testNotifyOnRelease(t *testing.T, h Harness) {
	n := notifier(t, h)
	key := Key(t, "k")
	tok := claim(t, h.Store, key, "fp")
	changed, cancel := n.Subscribe(key)
	defer cancel()
	if err := h.Store.Release(context.Background(), key, tok); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, changed, "Release")
	tok = claim(t, h.Store, key, "fp")
	changed, cancel2 := n.Subscribe(key)
	defer cancel2()
	if err := h.Store.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, changed, "Delete")
	_ = tok
}
