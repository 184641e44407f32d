package main

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/internal/procinfo"
	"github.com/idemproxy/idemproxy/middleware"
)

// campaign is the bad-input campaign.
func campaign(cfg config) error {
	if err := flood(cfg.campaignKeys); err != nil {
		return err
	}
	return hostile(cfg)
}

// flood sends n unique keys through the core into a memory store bounded to 100k
// records and 64 MiB, and checks the bounds and the process's RSS.
func flood(n int) error {
	const maxRecords, maxBytes = 100_000, 64 << 20
	store, err := memstore.New(memstore.Options{MaxRecords: maxRecords, MaxBytes: maxBytes})
	if err != nil {
		return err
	}
	defer store.Close()
	idem, err := middleware.New(store, func(s *middleware.Settings) { s.Logger = discardLogger() })
	if err != nil {
		return err
	}
	body := strings.Repeat("x", 200)
	h := idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = io.WriteString(w, body)
	}))
	rssStart := procinfo.RSSKiB(0)
	var peak atomic.Int64
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &nullWriter{h: http.Header{}}
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				r, _ := http.NewRequest("POST", "http://api.example/charges", strings.NewReader(`{"amount":1}`))
				r.Header.Set("Idempotency-Key", "flood-"+strconv.FormatInt(i, 10))
				clear(w.h)
				h.ServeHTTP(w, r)
				if w.code != 201 {
					fmt.Fprintf(os.Stderr, "flood: request %d answered %d\n", i, w.code)
				}
				if i%50_000 == 0 {
					if rss := procinfo.RSSKiB(0); rss > peak.Load() {
						peak.Store(rss)
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if rss := procinfo.RSSKiB(0); rss > peak.Load() {
		peak.Store(rss)
	}
	runtime.GC()
	rssEnd := procinfo.RSSKiB(0)
	fmt.Printf("campaign: %d unique keys in %v into a memory store bounded to %d records / %d MiB\n", n, elapsed.Round(time.Millisecond), maxRecords, maxBytes>>20)
	fmt.Printf("campaign: store holds %d records, %.1f MiB; RSS %.1f MiB at start, peak %.1f MiB, %.1f MiB at end\n",
		store.Len(), float64(store.Bytes())/(1<<20), float64(rssStart)/1024, float64(peak.Load())/1024, float64(rssEnd)/1024)
	switch {
	case store.Len() > maxRecords:
		return fmt.Errorf("memory store holds %d records, bound %d", store.Len(), maxRecords)
	case store.Bytes() > maxBytes:
		return fmt.Errorf("memory store holds %d bytes, bound %d", store.Bytes(), maxBytes)
	case peak.Load() > 512<<10: // 512 MiB: unbounded growth would be ~1 GiB for a million records
		return fmt.Errorf("RSS peaked at %.0f MiB: memory is not bounded", float64(peak.Load())/1024)
	}
	return nil
}

type nullWriter struct {
	h    http.Header
	code int
}

func (w *nullWriter) Header() http.Header         { return w.h }
func (w *nullWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *nullWriter) WriteHeader(c int)           { w.code = c }

// hostile sends malformed and oversized requests, as raw bytes, to the real binary
// on the memory store: each must get a clear 4xx, reach no upstream and leave no
// record. Then it checks that tenants never see each other's responses.
func hostile(cfg config) error {
	dir, err := os.MkdirTemp("", "idemproxy-campaign")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	up, err := startUpstream()
	if err != nil {
		return err
	}
	defer up.srv.Close()
	p := newProxy(dir, cfg.bin, "idemproxy-hostile", "http://"+up.addr, "memory")
	adminIdx := indexOf(p.argv, "--admin") + 1
	admin := p.argv[adminIdx]
	if err := p.start(); err != nil {
		return err
	}
	defer p.kill()

	big := strings.Repeat("a", 11<<20)
	cases := []struct {
		name string
		raw  string
		want int
	}{
		{"256-character key", req("Idempotency-Key: "+strings.Repeat("k", 256), "x"), 400},
		{"64 KiB key", req("Idempotency-Key: "+strings.Repeat("k", 64<<10), "x"), 400},
		{"headers over 1 MiB", req("Idempotency-Key: k1\r\nX-Pad: "+strings.Repeat("p", 2<<20), "x"), 431},
		{"11 MiB body", req("Idempotency-Key: k2", big), 413},
		{"11 MiB chunked body", chunked("Idempotency-Key: k3", big), 413},
		{"two key headers", req("Idempotency-Key: k4\r\nIdempotency-Key: k4", "x"), 400},
		{"key list", req("Idempotency-Key: a, b", "x"), 400},
		{"non-ASCII key", req("Idempotency-Key: ключ", "x"), 400},
		{"control character in key", req("Idempotency-Key: a\x01b", "x"), 400},
		{"empty key", req("Idempotency-Key: ", "x"), 400},
		{"empty quoted key", req(`Idempotency-Key: ""`, "x"), 400},
		{"unterminated quoted key", req(`Idempotency-Key: "abc`, "x"), 400},
		{"quoted key with trailing data", req(`Idempotency-Key: "a"b`, "x"), 400},
		{"bad escape in quoted key", req(`Idempotency-Key: "a\x"`, "x"), 400},
		{"quoted key with parameters", req(`Idempotency-Key: "a";p=1`, "x"), 400},
		{"control character in Authorization", req("Idempotency-Key: k5\r\nAuthorization: Bearer \x7f\x00", "x"), 400},
		{"header without colon", req("Idempotency-Key: k6\r\nAuthorization Bearer x", "x"), 400},
	}
	var problems []string
	for _, c := range cases {
		got, err := rawStatus(p.addr, c.raw)
		if err != nil || got != c.want {
			problems = append(problems, fmt.Sprintf("%s: got %d (%v), want %d", c.name, got, err, c.want))
		}
	}
	if n := up.attempts.Load(); n != 0 {
		problems = append(problems, fmt.Sprintf("%d hostile requests reached the upstream", n))
	}
	if n, err := metric(admin, "idemproxy_memory_records"); err != nil || n != 0 {
		problems = append(problems, fmt.Sprintf("hostile requests left %d records behind (%v)", n, err))
	}

	// Tenants: the same key from two credentials runs twice, and each replays only
	// its own. An opaque (obs-text) Authorization value is just another tenant.
	tenants := []string{"Bearer alice", "Bearer bob", "Bearer \xe9\xff"}
	ids := map[string]string{}
	for round := 0; round < 2; round++ {
		for _, auth := range tenants {
			resp, err := rawResponse(p.addr, req("Idempotency-Key: shared\r\nAuthorization: "+auth, `{"amount":5}`))
			if err != nil || resp.status != 201 {
				problems = append(problems, fmt.Sprintf("tenant %q round %d: %d %v", auth, round, resp.status, err))
				continue
			}
			if round == 0 {
				ids[auth] = resp.body
			} else if resp.body != ids[auth] {
				problems = append(problems, fmt.Sprintf("tenant %q got another answer on replay", auth))
			}
		}
	}
	if len(ids) == len(tenants) && (ids[tenants[0]] == ids[tenants[1]] || ids[tenants[1]] == ids[tenants[2]]) {
		problems = append(problems, "two tenants received the same stored response")
	}
	if n := up.attempts.Load(); n != int64(len(tenants)) {
		problems = append(problems, fmt.Sprintf("tenant requests reached the upstream %d times, want %d", n, len(tenants)))
	}
	fmt.Printf("campaign: %d hostile requests answered 4xx with nothing stored; %d tenants isolated\n", len(cases), len(tenants))
	if len(problems) > 0 {
		return fmt.Errorf("hostile inputs:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

func req(headers, body string) string {
	return "POST /charges HTTP/1.1\r\nHost: api.example\r\nContent-Type: application/json\r\n" + headers +
		"\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
}

func chunked(headers, body string) string {
	var b strings.Builder
	b.WriteString("POST /charges HTTP/1.1\r\nHost: api.example\r\n" + headers + "\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
	for off := 0; off < len(body); off += 1 << 20 {
		chunk := body[off:min(off+1<<20, len(body))]
		fmt.Fprintf(&b, "%x\r\n%s\r\n", len(chunk), chunk)
	}
	b.WriteString("0\r\n\r\n")
	return b.String()
}

type rawResp struct {
	status int
	body   string
}

func rawStatus(addr, raw string) (int, error) {
	r, err := rawResponse(addr, raw)
	return r.status, err
}

// rawResponse writes raw bytes and reads the answer; the server may answer and close
// before it has read everything, which is fine.
func rawResponse(addr, raw string) (rawResp, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return rawResp{}, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	go func() { _, _ = io.WriteString(conn, raw) }()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return rawResp{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return rawResp{resp.StatusCode, string(b)}, nil
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
