package localcache

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"
)

// The ring against a model: after any sequence of puts, drops, clears and
// expiries, every key it finds is the last one put under it, its entry is
// whole, the entries it indexes never overlap and lie where the ring holds
// entries, live counts their bytes, and the key put last is always found;
// in small rings, and in one whose segments are made as they are first used.
func TestRingAgainstAModel(t *testing.T) {
	for _, c := range []struct {
		max            int64
		keys, respMax  int
		ops, clearOdds int
	}{
		{1 << 10, 40, 1 << 7, 20000, 1},
		{4 << 10, 40, 1 << 9, 20000, 1},
		{64 << 10, 40, 8 << 10, 20000, 1},
		{1 << 20, 400, 8 << 10, 8000, 0},    // makes its 8 segments one by one, then wraps
		{1<<20 + 13, 400, 8 << 10, 8000, 0}, // and a last segment shorter than the others
	} {
		t.Run(fmt.Sprint(c.max), func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(uint64(c.max), 7))
			g := newRing(c.max)
			model := map[string]string{} // key → response last put (what may be found)
			created := time.UnixMilli(1_700_000_000_000)
			lazily, wrapped := false, false
			for op := range c.ops {
				key := fmt.Sprint("k", rnd.IntN(c.keys))
				if n := len(g.segs); n > 1 && n < 8 {
					lazily = true
				}
				wrapped = wrapped || g.wrapped
				switch r := rnd.IntN(100); {
				case r < 70:
					resp := strings.Repeat(string(rune('a'+op%26)), rnd.IntN(c.respMax))
					if g.put(key, "fp-"+key, created, created.Add(time.Hour), []byte(resp), int64(op)) {
						model[key] = resp
						if at, ok := g.find(key); !ok || g.copyOut(at).resp != resp {
							t.Fatalf("op %d: the key put last is not found whole", op)
						}
					} else if entrySize(len(key), len(key)+3, len(resp)) <= c.max/8 {
						t.Fatalf("op %d: refused an entry of %d bytes in a ring of %d", op, len(resp), c.max)
					}
				case r < 90:
					if at, ok := g.find(key); ok {
						g.drop(at)
					}
					delete(model, key)
				case r < 90+c.clearOdds:
					g.clear()
					clear(model)
				default:
					_, _ = g.find(key)
				}
				checkRing(t, op, g, model)
			}
			if c.clearOdds == 0 && (!lazily || g.made() != c.max || !wrapped) {
				t.Fatalf("segments made one by one %v, %d of %d bytes made, wrapped %v", lazily, g.made(), c.max, wrapped)
			}
		})
	}
}

// made is how many bytes of segments g has made.
func (g *ring) made() int64 {
	var n int64
	for _, b := range g.segs {
		n += int64(len(b))
	}
	return n
}

func checkRing(t *testing.T, op int, g ring, model map[string]string) {
	t.Helper()
	type span struct{ at, end int64 }
	var spans []span
	var live int64
	for h, at := range g.index {
		b := g.bytes(at)
		if binary.LittleEndian.Uint64(b) != h {
			t.Fatalf("op %d: the entry at %d is not the hash indexed", op, at)
		}
		size := g.size(at)
		kn := int64(binary.LittleEndian.Uint32(b[12:]))
		key := string(b[headerSize : headerSize+kn])
		want, ok := model[key]
		fn := int64(binary.LittleEndian.Uint32(b[16:]))
		rn := int64(binary.LittleEndian.Uint32(b[20:]))
		fp, resp := b[headerSize+kn:headerSize+kn+fn], b[headerSize+kn+fn:headerSize+kn+fn+rn]
		if !ok || string(resp) != want || string(fp) != "fp-"+key {
			t.Fatalf("op %d: found %q = %d bytes, want %v %d bytes", op, key, len(resp), ok, len(want))
		}
		in := !g.wrapped && at >= g.tail && at+size <= g.head ||
			g.wrapped && (at >= g.tail || at+size <= g.head)
		if !in || at/g.seg != (at+size-1)/g.seg {
			t.Fatalf("op %d: entry [%d,%d) outside the ring's entries or across segments of %d (tail %d head %d wrapped %v)", op, at, at+size, g.seg, g.tail, g.head, g.wrapped)
		}
		spans = append(spans, span{at, at + size})
		live += size
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].at < spans[j].at })
	for i := 1; i < len(spans); i++ {
		if spans[i].at < spans[i-1].end {
			t.Fatalf("op %d: entries overlap: %v %v", op, spans[i-1], spans[i])
		}
	}
	if live != g.live {
		t.Fatalf("op %d: live %d, entries hold %d", op, g.live, live)
	}
	for key := range model { // a key the ring lost must be out of the model too
		if _, ok := g.find(key); !ok {
			delete(model, key)
		}
	}
}

// Times come back as the same instant, in UTC when kept in UTC, and zero
// when zero.
func TestRingKeepsTimes(t *testing.T) {
	g := newRing(1 << 20)
	local := time.Unix(1_700_000_000, 123456789)
	for _, c := range []struct{ created, expires time.Time }{
		{local, local.UTC()}, {time.Time{}, local}, {local.UTC(), time.Time{}},
		{local.In(time.FixedZone("X", 3600)), local},
	} {
		g.put("k", "f", c.created, c.expires, []byte("r"), 1)
		at, _ := g.find("k")
		k := g.copyOut(at)
		if !k.created.Equal(c.created) || !k.recExpires.Equal(c.expires) || k.created.IsZero() != c.created.IsZero() ||
			(c.created.Location() == time.UTC) != (k.created.Location() == time.UTC) && !c.created.IsZero() {
			t.Fatalf("kept %v, %v; came back %v, %v", c.created, c.expires, k.created, k.recExpires)
		}
	}
}
