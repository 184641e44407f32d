package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/idemproxy/idemproxy/internal/redistest"
)

// Stores on one server whose prefixes nest (idem:, idem:eu:) or would match
// each other's keys as SCAN patterns (idem?, [ab], a*) each list their own
// records alone, held or not.
func TestPrefixesListTheirOwn(t *testing.T) {
	client := redistest.Start(t).Client()
	ctx := context.Background()
	prefixes := []string{"idem:", "idem:eu:", "idem:eu:west:", "idem?", "idemX", "[ab]", "a", "a*", "a*b", `c\`, `c\d`}
	stores := make([]*redisstore.Store, len(prefixes))
	mine := make([]map[string]bool, len(prefixes)) // the keys of each store
	for i, p := range prefixes {
		stores[i] = mustNew(t, client, redisstore.Options{Prefix: p})
		defer stores[i].Close()
		mine[i] = map[string]bool{}
		for _, unknown := range []bool{false, true} {
			var b [32]byte
			_, _ = rand.Read(b[:])
			key := hex.EncodeToString(b[:])
			tok := "tok-" + key
			if _, loaded, err := stores[i].ClaimOrGet(ctx, key, cache.Claim{Token: tok, Fingerprint: p, Duration: time.Minute}); err != nil || loaded {
				t.Fatalf("%s: claim: loaded=%v, %v", p, loaded, err)
			}
			resp := &cache.Response{Status: http.StatusCreated, Unknown: unknown}
			if err := stores[i].Complete(ctx, key, tok, &cache.Record{Fingerprint: p, Response: resp}, time.Hour); err != nil {
				t.Fatalf("%s: complete: %v", p, err)
			}
			mine[i][key] = unknown
		}
	}
	for i, s := range stores {
		for _, held := range []bool{false, true} {
			page, err := s.List(ctx, cache.ListQuery{Held: held, Limit: cache.MaxListLimit})
			if err != nil || page.Cursor != "" {
				t.Fatalf("%s: List(held %v): cursor %q, %v", prefixes[i], held, page.Cursor, err)
			}
			seen := 0
			for _, r := range page.Records {
				if unknown, ok := mine[i][r.Key]; !ok || r.Record.Fingerprint != prefixes[i] || held && !unknown {
					t.Errorf("%s lists %s (fingerprint %s), held %v: not its own", prefixes[i], r.Key, r.Record.Fingerprint, held)
					continue
				}
				seen++
			}
			if want := map[bool]int{false: 2, true: 1}[held]; seen != want {
				t.Errorf("%s lists %d of its records (held %v), want %d", prefixes[i], seen, held, want)
			}
		}
	}
}
