// Command rss measures the resident memory of a built idemproxy under hostile
// request bodies, for BENCHMARKS.md:
//
//	go build -C test -o /tmp/rss ./bench/rss
//	/tmp/rss -bin bin/idemproxy -scenario flood
//	/tmp/rss -bin bin/idemproxy -scenario json
//
// flood: -conns connections (60) each declare a -size body (10 MiB) with an
// Idempotency-Key and send it slowly (-rate bytes a second each, 1 MiB/s), all
// but its last byte, then stall for -hold (5s); then they hang up, and the
// proxy's memory is sampled for -after (5m) while it idles.
//
// json: one -size JSON array of -element (0) sent at once to a proxy run with
// --key-source json:/id.
//
// replay: one keyed request whose answer is -size bytes (10 MiB), read once;
// then -conns connections send it again and never read the replay. They stay
// open, and the proxy's memory is sampled for -after.
//
// It prints the proxy's resident set size (VmRSS) at rest before, its peak
// (VmHWM), and for the flood the answers the connections got and the resident
// size at the end of the flood and after it. The proxy runs with its defaults
// otherwise (max_request_body 10MiB, body_budget 256MiB where it has one); extra
// flags go after --.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/idemproxy/idemproxy/internal/procinfo"
)

func main() {
	bin := flag.String("bin", "bin/idemproxy", "the idemproxy binary to measure")
	scenario := flag.String("scenario", "flood", "flood, json or replay")
	conns := flag.Int("conns", 60, "flood: connections")
	size := flag.Int64("size", 10<<20, "body size in bytes (declared, for the flood)")
	rate := flag.Int64("rate", 1<<20, "flood: bytes a second each connection sends")
	hold := flag.Duration("hold", 5*time.Second, "flood: how long the connections stall once sent")
	after := flag.Duration("after", 5*time.Minute, "flood: how long memory is sampled after they hang up")
	flag.StringVar(&element, "element", "0", "json: the array's element, repeated")
	flag.StringVar(&godebug, "godebug", "", "GODEBUG for the proxy (e.g. gctrace=1)")
	flag.Parse()
	if err := run(*bin, *scenario, *conns, *size, *rate, *hold, *after, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "rss:", err)
		os.Exit(1)
	}
}

// element is the JSON array's element; godebug the proxy's GODEBUG.
var element, godebug string

func run(bin, scenario string, conns int, size, rate int64, hold, after time.Duration, extra []string) error {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
		if r.URL.Path == "/big" {
			_, _ = w.Write(bytes.Repeat([]byte("r"), int(size)))
		}
	}))
	defer up.Close()

	addr, admin := procinfo.FreeAddr(), procinfo.FreeAddr()
	args := []string{"--listen", addr, "--admin", admin, "--upstream", up.URL, "--log-level", "error"}
	if scenario == "json" {
		args = append(args, "--key-source", "json:/id")
	}
	cmd := exec.Command(bin, append(args, extra...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if godebug != "" {
		cmd.Env = append(os.Environ(), "GODEBUG="+godebug)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	var err error
	if err = waitUp("http://" + admin + "/healthz"); err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond)
	base := procinfo.RSSKiB(pid)
	fmt.Printf("binary %s, scenario %s\nrest: RSS %s\n", bin, scenario, mib(base))

	switch scenario {
	case "json":
		var doc bytes.Buffer
		doc.WriteString("[")
		item, last := element+",", element+"]"
		for int64(doc.Len()+len(item)+len(last)) <= size {
			doc.WriteString(item)
		}
		doc.WriteString(last)
		req, _ := http.NewRequest("POST", "http://"+addr+"/pay", bytes.NewReader(doc.Bytes()))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "json-1") // used only under -- --key-source header
		began := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		peak := procinfo.PeakRSSKiB(pid)
		fmt.Printf("one %d-byte JSON array: %d in %v\npeak: RSS %s (+%s over rest)\n",
			doc.Len(), resp.StatusCode, time.Since(began).Round(time.Millisecond), mib(peak), mib(peak-base))
	case "flood", "replay":
		var statuses string
		if scenario == "flood" {
			statuses = flood(addr, conns, size, rate, hold, pid)
		} else if statuses, err = stalledReaders(addr, conns, pid); err != nil {
			return err
		}
		peak := procinfo.PeakRSSKiB(pid)
		fmt.Printf("answers: %s\npeak: RSS %s (+%s over rest)\n", statuses, mib(peak), mib(peak-base))
		// Go returns freed memory after a GC, and an idle process is collected
		// only every two minutes: sample past that.
		marks := []time.Duration{time.Second, 5 * time.Second, 30 * time.Second}
		for m := time.Minute; m < after; m += time.Minute {
			marks = append(marks, m)
		}
		if marks[len(marks)-1] != after {
			marks = append(marks, after)
		}
		for _, at := range marks {
			if at > after {
				continue
			}
			time.Sleep(time.Until(hungUp.Add(at)))
			fmt.Printf("%v after the %s: RSS %s\n", at, map[string]string{"flood": "hang-up", "replay": "last request"}[scenario], mib(procinfo.RSSKiB(pid)))
		}
	default:
		return fmt.Errorf("unknown scenario %q: want flood, json or replay", scenario)
	}
	return nil
}

// hungUp is when the flood's connections hung up.
var hungUp time.Time

// flood runs the connections and returns a summary of their answers; it sets
// hungUp.
func flood(addr string, conns int, size, rate int64, hold time.Duration, pid int) string {
	var mu sync.Mutex
	answers := map[string]int{}
	note := func(s string) { mu.Lock(); answers[s]++; mu.Unlock() }
	var wg sync.WaitGroup
	release := make(chan struct{})
	var open []net.Conn
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			note("dial error")
			continue
		}
		open = append(open, c)
		wg.Add(2)
		go func() { // the answer, if one comes before the hang-up
			defer wg.Done()
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				note("no answer")
				return
			}
			resp.Body.Close()
			note(fmt.Sprint(resp.StatusCode))
		}()
		go func() { // the body, slowly, all but its last byte
			defer wg.Done()
			fmt.Fprintf(c, "POST /pay HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key: flood-%d\r\nContent-Length: %d\r\n\r\n", i, size)
			chunk := bytes.Repeat([]byte("f"), 64<<10)
			tick := time.NewTicker(time.Duration(int64(time.Second) * int64(len(chunk)) / rate))
			defer tick.Stop()
			for sent := int64(0); sent < size-1; {
				n := min(int64(len(chunk)), size-1-sent)
				if _, err := c.Write(chunk[:n]); err != nil {
					return // answered and closed: the rest is not wanted
				}
				sent += n
				select {
				case <-tick.C:
				case <-release:
					return
				}
			}
			<-release
		}()
	}
	sendTime := time.Duration(int64(time.Second) * size / rate)
	time.Sleep(sendTime + hold)
	fmt.Printf("end of the flood: RSS %s\n", mib(procinfo.RSSKiB(pid)))
	close(release)
	hungUp = time.Now()
	for _, c := range open {
		c.Close()
	}
	wg.Wait()
	var parts []string
	for k, v := range answers {
		parts = append(parts, fmt.Sprintf("%s×%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func waitUp(url string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the proxy did not come up: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func mib(kib int64) string { return fmt.Sprintf("%.0f MiB", float64(kib)/1024) }

// stalledReaders reads /big's answer once under a key, then opens conns
// connections that ask for its replay and never read; it returns a summary of
// the status lines they got (the first bytes only, which the kernel buffers),
// and sets hungUp to when the last one asked. The connections stay open.
func stalledReaders(addr string, conns, pid int) (string, error) {
	const req = "POST /big HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key: replay-1\r\nContent-Length: 2\r\n\r\n{}"
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	fmt.Printf("first execution: %d, %d bytes; RSS %s\n", resp.StatusCode, n, mib(procinfo.RSSKiB(pid)))
	time.Sleep(time.Second) // stored
	answers := map[string]int{}
	for range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			answers["dial error"]++
			continue
		}
		_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
		_, _ = io.WriteString(c, req)
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		line := make([]byte, len("HTTP/1.1 200"))
		if _, err := io.ReadFull(c, line); err != nil {
			answers["no answer"]++
		} else {
			answers[string(line[len("HTTP/1.1 "):])]++
		}
		// left open, never read again (closed when the process ends)
	}
	hungUp = time.Now()
	fmt.Printf("%d stalled readers: RSS %s\n", conns, mib(procinfo.RSSKiB(pid)))
	var parts []string
	for k, v := range answers {
		parts = append(parts, fmt.Sprintf("%s×%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", "), nil
}
