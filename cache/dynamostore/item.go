package dynamostore

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemproxy/idemproxy/cache"
)

// Attribute names (short: names count towards an item's size, and so its
// capacity units). See the package documentation for the layout.
const (
	attrPK       = "pk"  // S: the store key
	attrSK       = "sk"  // S: recordSK, or a chunk's "c#<version>#<index>"
	attrState    = "st"  // N: 1 in flight, 2 completed, 0 deleted (a tombstone)
	attrToken    = "tok" // B: the claim token; kept once completed
	attrFP       = "fp"  // B: the request's fingerprint
	attrCreated  = "ca"  // N: when the first request claimed the key, Unix ms
	attrExpires  = "ex"  // N: when the record lapses, Unix ms: a claim's claim end plus its hold
	attrLease    = "le"  // N: an in-flight claim's claim end, Unix ms (absent: ex)
	attrHoldMs   = "hd"  // N: an in-flight claim's hold, ms (ex less le)
	attrHoldS    = "hs"  // N: that hold in whole seconds, rounded up (ttl less le's second)
	attrFound    = "lf"  // B: the token of the claim that found the claim's claim lapsed
	attrTTL      = "ttl" // N: DynamoDB's time to live, Unix seconds
	attrUnknown  = "unk" // BOOL: the response is a held unknown outcome
	attrTrace    = "tr"  // B: an in-flight claim's trace context
	attrInfo     = "in"  // B: an in-flight claim's cache.Claim.Info (a completed record's is in its response)
	attrReplays  = "rc"  // N: how many replays were counted (Store.CountReplay)
	attrLastRep  = "rl"  // N: the latest of them, Unix ms
	attrResponse = "rsp" // B: the msgpack-encoded response, when inline
	attrChunks   = "nch" // N: how many chunk items hold the encoded response
	attrVersion  = "cv"  // S: the chunk items' version
	attrSize     = "rsz" // N: the encoded response's length, when chunked
	attrOp       = "op"  // S: the id of the Resolve or Delete that wrote the item
	attrData     = "d"   // B: a chunk's bytes
)

// recordSK is the record item's sort key.
const recordSK = "r"

// Record states as stored.
const (
	stateDeleted   = 0
	stateInFlight  = int64(cache.StateInFlight)
	stateCompleted = int64(cache.StateCompleted)
)

// tombstoneLife is how long a tombstone (the item a Delete or a nil Resolve
// leaves) is kept before DynamoDB may delete it: long enough for the SDK to
// re-send the call that wrote it. Its record is gone at once (ex is 0).
const tombstoneLife = time.Hour

// chunkGrace keeps chunk items past their record's expiry, so a reader that
// found the record live still finds its chunks.
const chunkGrace = time.Hour

func itemKey(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: &types.AttributeValueMemberS{Value: pk}, attrSK: &types.AttributeValueMemberS{Value: sk}}
}

func chunkSK(version string, i int) string { return "c#" + version + "#" + strconv.Itoa(i) }

func avS(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func avB(b []byte) types.AttributeValue { return &types.AttributeValueMemberB{Value: b} }
func avN(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
func avBool(b bool) types.AttributeValue { return &types.AttributeValueMemberBOOL{Value: b} }

func ms(t time.Time) int64 { return t.UnixMilli() }

// ttlSeconds is DynamoDB's time to live for an item that lapses at expMs:
// the second after it.
func ttlSeconds(expMs int64) int64 { return expMs/1000 + 1 }

func durMs(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// newOpID is a fresh id for one Resolve or Delete call. The SDK re-sends the
// call's request as it was, id included, so a re-sent call finds its own id on
// the item and answers as the first did.
func newOpID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// chunkVersion names a chunk set after what wrote it (a token, or a Resolve's
// id) and its content: a re-sent write puts the same items under the same
// keys, and nothing else ever does, so a reclaimed key never reads the chunks
// of a previous record, nor a second Complete's chunks those of the first.
func chunkVersion(writer string, blob []byte) string {
	h := sha256.New()
	h.Write([]byte(writer))
	h.Write([]byte{0})
	h.Write(blob)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// item is a record item as read.
type item map[string]types.AttributeValue

func (it item) s(name string) (string, bool) {
	v, ok := it[name].(*types.AttributeValueMemberS)
	if !ok {
		return "", false
	}
	return v.Value, true
}

func (it item) b(name string) []byte {
	if v, ok := it[name].(*types.AttributeValueMemberB); ok {
		return v.Value
	}
	return nil
}

func (it item) n(name string) (int64, bool) {
	v, ok := it[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	return n, err == nil
}

func (it item) bool(name string) bool {
	v, ok := it[name].(*types.AttributeValueMemberBOOL)
	return ok && v.Value
}

func (it item) state() int64 {
	st, _ := it.n(attrState)
	return st
}

// lapsed reports whether the item is an in-flight claim that lapsed at
// now and which is still held (live).
func (it item) lapsed(now time.Time) bool {
	if !it.live(now) || it.state() != stateInFlight {
		return false
	}
	le, ok := it.n(attrLease)
	return ok && le <= ms(now)
}

// live reports whether the item is a record that has not lapsed at now (a
// missing item, a tombstone and an expired record are all absent).
func (it item) live(now time.Time) bool {
	if len(it) == 0 {
		return false
	}
	ex, ok := it.n(attrExpires)
	st := it.state()
	return ok && ex > ms(now) && (st == stateInFlight || st == stateCompleted)
}

func (it item) token() string { return string(it.b(attrToken)) }

// completedBy reports whether the item is a live record completed by token.
func (it item) completedBy(token string, now time.Time) bool {
	return it.live(now) && it.state() == stateCompleted && it.token() == token
}

// chunked returns the chunk set an item's response is split over, if any.
func (it item) chunked() (version string, n int, size int64, ok bool) {
	nc, ok1 := it.n(attrChunks)
	v, ok2 := it.s(attrVersion)
	sz, ok3 := it.n(attrSize)
	if !ok1 || !ok2 || !ok3 || nc <= 0 {
		return "", 0, 0, false
	}
	return v, int(nc), sz, true
}

// record decodes a live record item; the response of a chunked one is read by
// the caller (blob nil and chunked true).
func (it item) record() (*cache.Record, error) {
	ca, ok1 := it.n(attrCreated)
	ex, ok2 := it.n(attrExpires)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%w: record item without its times", cache.ErrCorrupt)
	}
	rec := &cache.Record{Version: cache.FormatVersion, Fingerprint: string(it.b(attrFP)),
		CreatedAt: time.UnixMilli(ca), ExpiresAt: time.UnixMilli(ex)}
	switch st := it.state(); st {
	case stateInFlight:
		rec.State = cache.StateInFlight
		if le, ok := it.n(attrLease); ok {
			rec.ExpiresAt = time.UnixMilli(le)
		}
		if tr := it.b(attrTrace); len(tr) > 0 {
			rec.Trace = tr
		}
		rec.Info = string(it.b(attrInfo))
	case stateCompleted:
		rec.State = cache.StateCompleted
	default:
		return nil, fmt.Errorf("%w: state %d", cache.ErrCorrupt, st)
	}
	it.counts(rec)
	return rec, nil
}

// counts sets rec's replay count.
func (it item) counts(rec *cache.Record) {
	n, ok1 := it.n(attrReplays)
	last, ok2 := it.n(attrLastRep)
	if ok1 && ok2 && n > 0 {
		rec.Replays, rec.LastReplay = n, time.UnixMilli(last)
	}
}

// itemSize is an item's size as DynamoDB counts it for capacity: each
// attribute's name and value (numbers about one byte per two digits).
func itemSize(it map[string]types.AttributeValue) int {
	n := 0
	for name, v := range it {
		n += len(name) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return (len(v.Value)+1)/2 + 1
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += len(k) + valueSize(e) + 1
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += valueSize(e) + 1
		}
		return n
	}
	return 0
}

// lapsedRecord is a claim that lapsed, read as the held unknown outcome
// it is; found when token (a claim's; "" for none) found it.
func (it item) lapsedRecord(token string) *cache.Record {
	ca, _ := it.n(attrCreated)
	ex, _ := it.n(attrExpires)
	var tr []byte
	if b := it.b(attrTrace); len(b) > 0 {
		tr = b
	}
	found := token != "" && string(it.b(attrFound)) == token
	return cache.LapsedRecord(string(it.b(attrFP)), time.UnixMilli(ca), time.UnixMilli(ex), tr, string(it.b(attrInfo)), found)
}
