package dynamotest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// writeLimit is a token bucket of item bytes for BatchWriteItem.
type writeLimit struct {
	rate   float64 // bytes a second; 0: no limit
	now    func() time.Time
	tokens float64
	last   time.Time
	puts   int // items put by forwarded BatchWriteItem requests
}

// LimitWrites makes BatchWriteItem take at most rate bytes of items a
// second, with a burst of one second's worth, as one DynamoDB partition takes
// about 1 MB a second: the items of a request past what the budget allows are
// left out of what is forwarded and come back in UnprocessedItems, and a
// request none of whose items fits is answered
// ProvisionedThroughputExceededException, as DynamoDB does. The first item of
// a request is taken while the budget is positive (it may go into debt), so a
// chunk larger than the burst still passes. now is the bucket's clock (nil:
// time.Now): one that does not move stops writes once the first second's
// worth is spent. A rate of 0 lifts the limit but keeps counting the items put
// (Puts). Faults injected with Inject come first.
func (f *Faults) LimitWrites(rate int, now func() time.Time) {
	if now == nil {
		now = time.Now
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	puts := 0
	if f.writes != nil {
		puts = f.writes.puts
	}
	f.writes = &writeLimit{rate: float64(rate), now: now, tokens: float64(rate), last: now(), puts: puts}
}

// Puts is how many items BatchWriteItem requests put (forwarded, and the
// reply delivered) while LimitWrites was in force, since the last Reset.
func (f *Faults) Puts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.writes == nil {
		return 0
	}
	return f.writes.puts
}

func (f *Faults) limited() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes != nil
}

// admit takes from the budget the items of sizes it can, in order, and
// returns how many.
func (f *Faults) admit(sizes []int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.writes
	if w.rate <= 0 {
		return len(sizes)
	}
	t := w.now()
	w.tokens = min(w.rate, w.tokens+w.rate*t.Sub(w.last).Seconds())
	w.last = t
	n := 0
	for _, size := range sizes {
		if w.tokens <= 0 || n > 0 && float64(size) > w.tokens {
			break
		}
		w.tokens -= float64(size)
		n++
	}
	return n
}

func (f *Faults) counted(puts int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes.puts += puts
}

// batchWrite is the part of a BatchWriteItem request and reply the limiter
// reads; the rest passes as it is.
type batchWrite struct {
	RequestItems map[string][]json.RawMessage
}

// limitWrites forwards the items of a BatchWriteItem request that the budget
// admits and answers the others as unprocessed.
func (f *Faults) limitWrites(next http.RoundTripper, r *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	var whole map[string]json.RawMessage
	var req batchWrite
	if err := json.Unmarshal(body, &whole); err != nil {
		return nil, fmt.Errorf("dynamotest: reading a BatchWriteItem request: %w", err)
	}
	if err := json.Unmarshal(body, &req); err != nil || len(req.RequestItems) != 1 {
		return nil, fmt.Errorf("dynamotest: a BatchWriteItem request of one table expected (%v)", err)
	}
	var table string
	var items []json.RawMessage
	for table, items = range req.RequestItems {
	}
	sizes := make([]int, len(items))
	isPut := make([]bool, len(items))
	for i, it := range items {
		sizes[i], isPut[i] = requestSize(it)
	}
	n := f.admit(sizes)
	if n == 0 {
		return errorReply(r, http.StatusBadRequest, "ProvisionedThroughputExceededException",
			"The level of configured provisioned throughput for the table was exceeded (injected)."), nil
	}
	admitted, left := items[:n], items[n:]
	whole["RequestItems"], _ = json.Marshal(map[string][]json.RawMessage{table: admitted})
	body, _ = json.Marshal(whole)
	fwd := r.Clone(r.Context())
	fwd.Body = io.NopCloser(bytes.NewReader(body))
	fwd.ContentLength = int64(len(body))
	fwd.Header.Set("Content-Length", strconv.Itoa(len(body)))
	resp, err := next.RoundTrip(fwd)
	if err != nil {
		return nil, err
	}
	reply, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		setBody(resp, reply)
		return resp, nil
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal(reply, &out); err != nil {
		return nil, fmt.Errorf("dynamotest: reading a BatchWriteItem reply: %w", err)
	}
	unprocessed := map[string][]json.RawMessage{}
	if raw := out["UnprocessedItems"]; len(raw) > 0 {
		if err := json.Unmarshal(raw, &unprocessed); err != nil {
			return nil, fmt.Errorf("dynamotest: reading a BatchWriteItem reply: %w", err)
		}
	}
	puts := 0
	for _, put := range isPut[:n] {
		if put {
			puts++
		}
	}
	f.counted(puts - len(unprocessed[table])) // DynamoDB Local leaves none unprocessed
	if len(left) > 0 {
		unprocessed[table] = append(unprocessed[table], left...)
	}
	out["UnprocessedItems"], _ = json.Marshal(unprocessed)
	reply, _ = json.Marshal(out)
	setBody(resp, reply)
	return resp, nil
}

// requestSize is the size of the item a write request puts, as DynamoDB
// counts it (names and values; binary values decoded), or 1 for a delete.
func requestSize(raw json.RawMessage) (size int, put bool) {
	var w struct {
		PutRequest *struct {
			Item map[string]map[string]json.RawMessage
		}
	}
	if json.Unmarshal(raw, &w) != nil || w.PutRequest == nil {
		return 1, false
	}
	n := 0
	for name, v := range w.PutRequest.Item {
		n += len(name)
		for typ, val := range v {
			switch typ {
			case "B":
				n += base64.StdEncoding.DecodedLen(len(val) - 2)
			default:
				n += len(val)
			}
		}
	}
	return n, true
}
