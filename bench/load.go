package main

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// result of one load run.
type result struct {
	latencies []time.Duration
	elapsed   time.Duration
	statuses  map[int]int
	errors    int
	replayed  int
}

func (r result) rps() float64 { return float64(len(r.latencies)) / r.elapsed.Seconds() }

// load sends total POSTs over conns keep-alive connections; key(i) names request
// i's Idempotency-Key. Each worker records its own latencies.
func load(client *http.Client, target string, conns, total int, key func(i int) string) result {
	body := []byte(`{"amount":100,"currency":"eur","source":"tok_visa"}`)
	var next atomic.Int64
	type part struct {
		lat      []time.Duration
		statuses map[int]int
		errors   int
		replayed int
	}
	parts := make([]part, conns)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < conns; w++ {
		wg.Add(1)
		go func(p *part) {
			defer wg.Done()
			p.lat = make([]time.Duration, 0, total/conns+1)
			p.statuses = map[int]int{}
			for {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				req, _ := http.NewRequest("POST", target, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer sk_test_bench")
				if k := key(i); k != "" {
					req.Header.Set("Idempotency-Key", k)
				}
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					p.errors++
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				p.lat = append(p.lat, time.Since(t0))
				p.statuses[resp.StatusCode]++
				if resp.Header.Get("Idempotent-Replayed") == "true" {
					p.replayed++
				}
			}
		}(&parts[w])
	}
	wg.Wait()
	res := result{elapsed: time.Since(start), statuses: map[int]int{}}
	for _, p := range parts {
		res.latencies = append(res.latencies, p.lat...)
		res.errors += p.errors
		res.replayed += p.replayed
		for s, n := range p.statuses {
			res.statuses[s] += n
		}
	}
	return res
}

func newClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
		DisableCompression:  true,
		IdleConnTimeout:     time.Minute,
	}, Timeout: 30 * time.Second}
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return sorted[i]
}

func sortedCopy(d []time.Duration) []time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s
}
