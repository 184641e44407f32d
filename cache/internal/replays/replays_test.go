package replays

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestBatchAddsUpAndFlushes(t *testing.T) {
	var (
		mu      sync.Mutex
		flushed []Count
	)
	b := New(time.Hour, time.Second, func(_ context.Context, cs []Count) error {
		mu.Lock()
		flushed = append(flushed, cs...)
		mu.Unlock()
		return nil
	})
	created := time.Unix(100, 0)
	b.Add("k", created, time.Unix(200, 0))
	b.Add("k", created, time.Unix(150, 0))                   // earlier: the latest stays
	b.Add("k", created.Add(-time.Second), time.Unix(999, 0)) // an older record's: dropped
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(flushed) != 1 || flushed[0].N != 2 || !flushed[0].Last.Equal(time.Unix(200, 0)) || !flushed[0].Created.Equal(created) {
		t.Fatalf("flushed %+v", flushed)
	}
	// A newer record under the key starts again.
	b.Add("k", created, time.Unix(300, 0))
	b.Add("k", created.Add(time.Second), time.Unix(301, 0))
	for i := range MaxKeys + 10 {
		b.Add(string(rune('a'+i%26))+time.Duration(i).String(), created, time.Unix(400, 0))
	}
	b.Close() // flushes what it holds
	b.Add("late", created, time.Unix(500, 0))
	mu.Lock()
	defer mu.Unlock()
	if got := len(flushed) - 1; got != MaxKeys {
		t.Fatalf("%d keys flushed at Close, want the bound, %d", got, MaxKeys)
	}
	for _, c := range flushed[1:] {
		if c.Key == "k" && (c.N != 1 || !c.Created.Equal(created.Add(time.Second))) {
			t.Fatalf("the newer record's count: %+v", c)
		}
		if c.Key == "late" {
			t.Fatal("a count after Close was flushed")
		}
	}
}

// A batch nobody adds to starts no goroutine, and closes at once.
func TestBatchIdleClose(t *testing.T) {
	b := New(time.Millisecond, time.Second, func(context.Context, []Count) error {
		t.Error("flushed with nothing added")
		return nil
	})
	b.Close()
	b.Close()
}
