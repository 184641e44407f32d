package redisstore

// Listing for operators (cache.Lister), by SCAN: never KEYS, which blocks
// the server for the whole keyspace.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/idemproxy/idemproxy/cache"
)

var _ cache.Lister = (*Store)(nil)

const (
	// scanCount is the COUNT hint of each SCAN: about how many keys one call
	// looks at.
	scanCount = 500
	// scansPerPage bounds the SCAN calls of one page, so a page whose keys
	// are few among many others ends (empty, with a cursor) within about
	// scansPerPage*scanCount keys looked at.
	scansPerPage = 40
)

// List implements cache.Lister with SCAN … MATCH <prefix><q.Prefix>* over
// the store's keys (on Redis Cluster, over each primary in turn). Each SCAN
// call looks at about 500 of the server's keys, whatever their name, and a
// page makes at most 40: listing costs time in proportion to the whole
// keyspace (a million keys, about 2,000 calls), each call short, so other
// clients are not blocked. For each key that matches, one pipelined HMGET
// tells whether it may be held, and the records listed are read as Get reads
// them. A page may be empty while its cursor is not, hold a few more than
// q.Limit, and SCAN may list a key twice. The records of a store whose
// prefix extends this one's, which the pattern matches too, are left out
// (foreign).
func (s *Store) List(ctx context.Context, q cache.ListQuery) (cache.ListPage, error) {
	nodes, err := s.scanNodes(ctx)
	if err != nil {
		return cache.ListPage{}, fmt.Errorf("redisstore: listing: %w", err)
	}
	node, cursor, err := parseListCursor(q.Cursor, len(nodes))
	if err != nil {
		return cache.ListPage{}, err
	}
	pattern := globEscape(s.prefix+q.Prefix) + "*"
	jobs := s.jobKeys()
	limit := q.ListLimit()
	var page cache.ListPage
	for scans := 0; node < len(nodes) && len(page.Records) < limit && scans < scansPerPage; scans++ {
		n := nodes[node]
		keys, next, err := n.Scan(ctx, cursor, pattern, scanCount).Result()
		if err != nil {
			return cache.ListPage{}, fmt.Errorf("redisstore: listing: %w", err)
		}
		if cursor = next; cursor == 0 {
			node++
		}
		keys = slices.DeleteFunc(keys, func(k string) bool {
			return slices.Contains(jobs, k) || k == s.channel() || foreign(s.prefix, k[len(s.prefix):])
		})
		if q.Held {
			if keys, err = mayBeHeld(ctx, n, keys); err != nil {
				return cache.ListPage{}, fmt.Errorf("redisstore: listing: %w", err)
			}
		}
		for _, k := range keys {
			key := strings.TrimPrefix(k, s.prefix)
			rec, err := s.Get(ctx, key)
			if errors.Is(err, cache.ErrCorrupt) {
				continue // a key under the prefix that is not one of ours (a shared keyspace)
			}
			if err := q.Keep(&page, key, rec, err); err != nil {
				return cache.ListPage{}, err
			}
		}
	}
	if node < len(nodes) {
		page.Cursor = strconv.Itoa(node) + ":" + strconv.FormatUint(cursor, 10)
	}
	return page, nil
}

// foreign reports whether rest, what follows the store's prefix in a Redis
// key that SCAN's pattern matched, is the record of another store whose
// prefix nests with this one's: the middleware's key is 64 lowercase hex
// digits, so such a key reads as one after a longer prefix (idem:eu: after
// idem:, the key longer than 64 and ending in 64 hex digits) or after a
// shorter one that this prefix extends by hex digits (a*'s record a*b7e7…
// seen by a*b as 63 hex digits). No key of the middleware has either shape
// under its own prefix. (The other store's reconcile keys are no records,
// and are dropped as any foreign value is.)
func foreign(prefix, rest string) bool {
	if len(rest) > 64 {
		return isHex(rest[len(rest)-64:])
	}
	short := 64 - len(rest)
	return short > 0 && len(prefix) >= short && isHex(rest) && isHex(prefix[len(prefix)-short:])
}

// isHex reports whether s is lowercase hex digits only.
func isHex(s string) bool {
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// mayBeHeld keeps the keys whose hash may be a held unknown outcome: one
// whose response is one (u), or a claim with a hold (its claim end le before
// its expiry ex). Get then decides. The keys were scanned on n, which holds
// them.
func mayBeHeld(ctx context.Context, n redis.Cmdable, keys []string) ([]string, error) {
	if len(keys) == 0 {
		return keys, nil
	}
	cmds := make([]*redis.SliceCmd, len(keys))
	_, err := n.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.HMGet(ctx, k, "st", "u", "le", "ex")
		}
		return nil
	})
	if err != nil && !isWrongType(err) {
		return nil, err
	}
	out := keys[:0]
	for i, k := range keys {
		v, err := cmds[i].Result()
		if err != nil || len(v) != 4 {
			continue // not a hash: not one of ours
		}
		st, _ := v[0].(string)
		u, _ := v[1].(string)
		le, _ := v[2].(string)
		ex, _ := v[3].(string)
		if u == "1" || (st == "1" && le != "" && le != ex) {
			out = append(out, k)
		}
	}
	return out, nil
}

func isWrongType(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE") }

// scanNodes are the servers a listing scans: the primaries of a Cluster, in
// the order of their addresses, else the one client.
func (s *Store) scanNodes(ctx context.Context) ([]redis.Cmdable, error) {
	cc, ok := s.c.(*redis.ClusterClient)
	if !ok {
		return []redis.Cmdable{s.c}, nil
	}
	var mu sync.Mutex
	var primaries []*redis.Client
	err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		primaries = append(primaries, c)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(primaries, func(a, b *redis.Client) int { return strings.Compare(a.Options().Addr, b.Options().Addr) })
	out := make([]redis.Cmdable, len(primaries))
	for i, c := range primaries {
		out[i] = c
	}
	return out, nil
}

// parseListCursor reads "<node>:<SCAN cursor>"; "" is the first page.
func parseListCursor(c string, nodes int) (int, uint64, error) {
	if c == "" {
		return 0, 0, nil
	}
	n, sc, ok := strings.Cut(c, ":")
	node, err1 := strconv.Atoi(n)
	cursor, err2 := strconv.ParseUint(sc, 10, 64)
	if !ok || err1 != nil || err2 != nil || node < 0 || node >= nodes {
		return 0, 0, fmt.Errorf("redisstore: %w", cache.ErrBadCursor)
	}
	return node, cursor, nil
}

// globEscape escapes what SCAN's MATCH reads as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
