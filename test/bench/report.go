package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemproxy/idemproxy/internal/procinfo"
	"github.com/redis/go-redis/v9"
)

// scriptCalls is the number of EVALSHA/EVAL commands since the last CONFIG RESETSTAT.
func scriptCalls(rdb *redis.Client) int64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return -1
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			if rest, ok := strings.CutPrefix(line, cmd); ok {
				for _, f := range strings.Split(rest, ",") {
					if v, ok := strings.CutPrefix(f, "calls="); ok {
						c, _ := strconv.ParseInt(v, 10, 64)
						n += c
					}
				}
			}
		}
	}
	return n
}

// measureConflict holds one key in flight (a slow upstream call) and sends
// duplicates of it, counting Redis commands per duplicate.
func measureConflict(target string, rdb *redis.Client) float64 {
	done := make(chan struct{})
	go func() {
		defer close(done)
		load(target+"?delay=1500", 1, 1, keyConst("held"))
	}()
	time.Sleep(300 * time.Millisecond)
	rdb.ConfigResetStat(context.Background())
	res := load(target+"?delay=1500", 8, 400, keyConst("held"))
	cmds := scriptCalls(rdb)
	<-done
	if res.statuses[409] == 0 {
		return -1
	}
	return float64(cmds) / float64(len(res.latencies))
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func report(cfg benchConfig, scenarios []*scenario, conflictCmds float64) {
	var bare, caddyBase *scenario
	for _, s := range scenarios {
		switch s.group {
		case "proxy-base":
			bare = s
		case "caddy-base":
			caddyBase = s
		}
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d.Microseconds())/1000) }
	fmt.Printf("\n%d rounds × %d requests per scenario (DynamoDB Local a tenth), %d connections; server under test on core 1, load generator + upstream + Redis + PostgreSQL + DynamoDB Local on core 0\n\n",
		cfg.rounds, cfg.requests, cfg.conns)
	fmt.Println("| scenario | req/s (median) | p50 ms | p99 ms | p99.9 ms | throughput ratio (range over rounds) | p99 ratio | Redis cmds/req | wrong answers |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	type row struct{ rps, p99 float64 }
	rows := map[*scenario]row{}
	for _, s := range scenarios {
		lat := sortedCopy(s.lat)
		r := row{median(s.rps), float64(percentile(lat, 0.99))}
		rows[s] = r
		base := bare
		if s.group == "caddy" || s.group == "caddy-base" {
			base = caddyBase
		}
		ratio, p99ratio := "", ""
		if base != nil && s != base && s.group != "ref" {
			bl := sortedCopy(base.lat)
			// Each round ran both scenarios a few seconds apart: the ratio is
			// taken round by round, so drift between rounds cancels, and the
			// median of those is reported with their range.
			var per []float64
			for i := range min(len(s.rps), len(base.rps)) {
				per = append(per, s.rps[i]/base.rps[i])
			}
			ratio = fmt.Sprintf("%.2f× %s (%.2f–%.2f)", median(per), baseName(base), slices.Min(per), slices.Max(per))
			p99ratio = fmt.Sprintf("%.2f×", r.p99/float64(percentile(bl, 0.99)))
		}
		cmds := ""
		if s.redis && s.reqs > 0 {
			cmds = fmt.Sprintf("%.2f", float64(s.cmds)/float64(s.reqs))
		}
		fmt.Printf("| %s | %.0f | %s | %s | %s | %s | %s | %s | %d |\n", s.name, r.rps, ms(percentile(lat, 0.5)),
			ms(percentile(lat, 0.99)), ms(percentile(lat, 0.999)), ratio, p99ratio, cmds, s.bad)
	}
	if conflictCmds >= 0 {
		fmt.Printf("\nRedis commands per conflict (409): %.2f\n", conflictCmds)
	}
	reportRetries(scenarios)

	// Where the CPU went, per request, and how busy each core was: a core near
	// 100% is what limited a scenario.
	fmt.Println("\nCPU per request (µs, from /proc and getrusage over every round) and core utilisation:")
	fmt.Println()
	fmt.Println("| scenario | server under test (core 1) | upstream | store (Redis, PostgreSQL, DynamoDB Local) | load generator | core 1 busy | core 0 busy |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|")
	for _, s := range scenarios {
		if s.served == 0 || s.elapsed <= 0 {
			continue
		}
		per := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/float64(s.served)) }
		busy := func(d time.Duration) string { return fmt.Sprintf("%.0f%%", 100*d.Seconds()/s.elapsed.Seconds()) }
		up := s.cpuUp
		if s.server == "upstream-direct" {
			up = 0 // the shared upstream is idle: the server under test is an upstream
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s |\n", s.name, per(s.cpuServer), per(up), per(s.cpuStore), per(s.cpuLoad),
			busy(s.cpuServer), busy(up+s.cpuStore+s.cpuLoad))
	}
}

type cpuTimes struct{ server, up, store, load time.Duration }

func cpuSnapshot(pids map[string]int, s *scenario) cpuTimes {
	t := cpuTimes{
		server: procinfo.CPUTime(pids[s.server]),
		up:     procinfo.CPUTime(pids["upstream"]),
		load:   procinfo.SelfCPUTime(),
	}
	if s.peerServer != "" { // both instances run on core 1
		t.server += procinfo.CPUTime(pids[s.peerServer])
	}
	if s.store != "" {
		t.store = procinfo.TreeCPUTime(pids[s.store]) // PostgreSQL: the postmaster and its backends
	}
	return t
}

func baseName(s *scenario) string {
	if s.group == "caddy-base" {
		return "Caddy"
	}
	return "bare"
}

// flood sends unique keys to an idemproxy bounded to 100k records / 64 MiB and
// samples its RSS: memory must stay bounded however many keys arrive.
func flood(cfg benchConfig, dir, idemproxy, upURL string) error {
	addr := procinfo.FreeAddr()
	p, err := start(dir, coreTest, "idemproxy-flood", nil, idemproxy, "--listen", addr, "--upstream", upURL,
		"--log-level", "warn", "--memory-max-records", "100000", "--memory-max-bytes", "64MiB")
	if err != nil {
		return err
	}
	defer p.stop()
	if err := waitTCP(addr); err != nil {
		return err
	}
	pid := p.cmd.Process.Pid
	var mu sync.Mutex
	var samples []int64
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				// taskset execs the program in place, so the pid is idemproxy's.
				if rss := procinfo.RSSKiB(pid); rss > 0 {
					mu.Lock()
					samples = append(samples, rss)
					mu.Unlock()
				}
			}
		}
	}()
	startRSS := procinfo.RSSKiB(pid)
	var after100k int64
	sent := 0
	for sent < cfg.flood {
		n := min(50000, cfg.flood-sent)
		base := sent
		load("http://"+addr, cfg.conns, n, func(dst []byte, i int) []byte { return keyPrefix("flood-")(dst, base+i) })
		sent += n
		if sent == 100000 {
			after100k = procinfo.RSSKiB(pid)
		}
	}
	close(stop)
	endRSS := procinfo.RSSKiB(pid)
	mu.Lock()
	peak := slices.Max(append(samples, endRSS))
	mu.Unlock()
	fmt.Printf("\nMemory flood: %d unique keys into --memory-max-records 100000 --memory-max-bytes 64MiB\n", cfg.flood)
	fmt.Printf("RSS: at start %.1f MiB, after 100k keys %.1f MiB, peak %.1f MiB, after %d keys %.1f MiB\n",
		float64(startRSS)/1024, float64(after100k)/1024, float64(peak)/1024, cfg.flood, float64(endRSS)/1024)
	return nil
}

// reportRetries prints the retry scenarios' round trips to their store per
// request of each step, counted on the wire (Redis MONITOR, PostgreSQL
// pg_stat_statements) over retryCountKeys keys sent one request at a time.
func reportRetries(scenarios []*scenario) {
	header := false
	for _, s := range scenarios {
		if s.counter == nil {
			continue
		}
		if !header {
			header = true
			fmt.Printf("\nRetry scenarios, store round trips per request counted on the wire (Redis MONITOR, PostgreSQL pg_stat_statements), %d keys one request at a time:\n\n", retryCountKeys)
			fmt.Printf("| scenario | %s | %s | %s | per request | pings sent on their own |\n", retrySteps[0], retrySteps[1], retrySteps[2])
			fmt.Println("|---|---:|---:|---:|---:|---:|")
		}
		c := s.counted
		if c.err != nil || c.keys == 0 {
			fmt.Printf("| %s | not counted: %v | | | | |\n", s.name, c.err)
			continue
		}
		per := func(n int64) string { return fmt.Sprintf("%.2f", float64(n)/float64(c.keys)) }
		total := c.steps[0] + c.steps[1] + c.steps[2]
		fmt.Printf("| %s | %s | %s | %s | %.2f | %d |\n", s.name, per(c.steps[0]), per(c.steps[1]), per(c.steps[2]),
			float64(total)/float64(3*c.keys), c.pings)
	}
}
