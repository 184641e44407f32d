package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemproxy/idemproxy/internal/procinfo"
	"github.com/redis/go-redis/v9"
)

type benchConfig struct {
	requests, rounds, conns, flood int
	bin                            string
	skipCaddy                      bool
}

type proc struct {
	name string
	cmd  *exec.Cmd
}

// Cores: the server under test gets core 1 to itself; everything else shares core 0.
const (
	coreEnv  = "0"
	coreTest = "1"
)

func start(dir, core, name string, argv ...string) (*proc, error) {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("taskset", append([]string{"-c", core}, argv...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &proc{name: name, cmd: cmd}, nil
}

func (p *proc) stop() {
	if p != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

func waitTCP(addr string) error {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s did not accept connections within 15s", addr)
}

type scenario struct {
	name   string
	target string
	replay bool
	redis  bool
	group  string // "proxy" or "caddy": what the ratio is against
	rps    []float64
	lat    []time.Duration
	bad    int // answers of the wrong kind (not 201, or replayed when it should not be, …)
	cmds   int64
	reqs   int64
	// CPU accounting: server is the process under test (core 1); the upstream,
	// Redis and the load generator share core 0.
	server                     string
	cpuServer, cpuUp, cpuRedis time.Duration
	cpuLoad, elapsed           time.Duration
	served                     int64
}

func run(cfg benchConfig) error {
	dir, err := os.MkdirTemp("", "idemproxy-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	idemproxy := filepath.Join(cfg.bin, "idemproxy")
	caddyBin := filepath.Join(cfg.bin, "caddy")
	for _, b := range []string{idemproxy, caddyBin} {
		if _, err := os.Stat(b); err != nil && !(cfg.skipCaddy && b == caddyBin) {
			return fmt.Errorf("%s missing: run `make build caddy` first", b)
		}
	}
	redisBin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redis-server not on PATH (apt-get install redis-server)")
	}

	var procs []*proc
	pids := map[string]int{}
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	launch := func(core, name, addr string, argv ...string) (string, error) {
		p, err := start(dir, core, name, argv...)
		if err != nil {
			return "", err
		}
		procs = append(procs, p)
		pids[name] = p.cmd.Process.Pid // taskset execs the program in place
		if err := waitTCP(addr); err != nil {
			b, _ := os.ReadFile(filepath.Join(dir, name+".log"))
			return "", fmt.Errorf("%s: %v\n%s", name, err, b)
		}
		return "http://" + addr, nil
	}

	redisAddr := procinfo.FreeAddr()
	_, port, _ := net.SplitHostPort(redisAddr)
	if _, err := launch(coreEnv, "redis", redisAddr, redisBin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"); err != nil {
		return err
	}
	up := procinfo.FreeAddr()
	upURL, err := launch(coreEnv, "upstream", up, self, "upstream", "--listen", up)
	if err != nil {
		return err
	}
	direct := procinfo.FreeAddr()
	directURL, err := launch(coreTest, "upstream-direct", direct, self, "upstream", "--listen", direct)
	if err != nil {
		return err
	}
	bare := procinfo.FreeAddr()
	bareURL, err := launch(coreTest, "bareproxy", bare, self, "bareproxy", "--listen", bare, "--upstream", upURL)
	if err != nil {
		return err
	}
	// Request logs off (--log-level warn): one JSON line per request is a cost
	// the bare proxy does not pay. Metrics stay on.
	mem := procinfo.FreeAddr()
	memURL, err := launch(coreTest, "idemproxy-memory", mem, idemproxy, "--listen", mem, "--upstream", upURL, "--log-level", "warn")
	if err != nil {
		return err
	}
	red := procinfo.FreeAddr()
	redURL, err := launch(coreTest, "idemproxy-redis", red, idemproxy, "--listen", red, "--upstream", upURL,
		"--store", "redis://"+redisAddr+"/0?pool_size=64", "--log-level", "warn")
	if err != nil {
		return err
	}
	scenarios := []*scenario{
		{name: "upstream directly", target: directURL, group: "ref", server: "upstream-direct"},
		{name: "bare httputil.ReverseProxy", target: bareURL, group: "proxy-base", server: "bareproxy"},
		{name: "idemproxy memory: first executions", target: memURL, group: "proxy", server: "idemproxy-memory"},
		{name: "idemproxy memory: replays", target: memURL, replay: true, group: "proxy", server: "idemproxy-memory"},
		{name: "idemproxy Redis: first executions", target: redURL, redis: true, group: "proxy", server: "idemproxy-redis"},
		{name: "idemproxy Redis: replays", target: redURL, replay: true, redis: true, group: "proxy", server: "idemproxy-redis"},
	}
	if !cfg.skipCaddy {
		c1, c2 := procinfo.FreeAddr(), procinfo.FreeAddr()
		for _, c := range []struct {
			addr, name string
			module     bool
		}{{c1, "caddy", false}, {c2, "caddy-idempotency", true}} {
			conf := filepath.Join(dir, c.name+".json")
			if err := os.WriteFile(conf, []byte(caddyConfig(c.addr, up, c.module)), 0o644); err != nil {
				return err
			}
			if _, err := launch(coreTest, c.name, c.addr, caddyBin, "run", "--config", conf); err != nil {
				return err
			}
		}
		scenarios = append(scenarios,
			&scenario{name: "Caddy reverse_proxy", target: "http://" + c1, group: "caddy-base", server: "caddy"},
			&scenario{name: "Caddy + idempotency: first executions", target: "http://" + c2, group: "caddy", server: "caddy-idempotency"},
			&scenario{name: "Caddy + idempotency: replays", target: "http://" + c2, replay: true, group: "caddy", server: "caddy-idempotency"},
		)
	}

	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	replayKey := keyCycle("replay-", 256)

	fmt.Printf("warming up %d scenarios…\n", len(scenarios))
	for si, s := range scenarios {
		load(s.target, cfg.conns, 256, replayKey) // first pass stores the replay keys
		load(s.target, cfg.conns, 2000, keyPrefix(fmt.Sprintf("warm-%d-", si)))
	}
	for round := 0; round < cfg.rounds; round++ {
		for si, s := range scenarios {
			key := keyPrefix(fmt.Sprintf("u-%d-%d-", round, si))
			if s.replay {
				key = replayKey
			}
			if s.redis {
				rdb.ConfigResetStat(context.Background())
			}
			cpu0 := cpuSnapshot(pids, s.server)
			res := load(s.target, cfg.conns, cfg.requests, key)
			cpu1 := cpuSnapshot(pids, s.server)
			s.cpuServer += cpu1.server - cpu0.server
			s.cpuUp += cpu1.up - cpu0.up
			s.cpuRedis += cpu1.redis - cpu0.redis
			s.cpuLoad += cpu1.load - cpu0.load
			s.elapsed += res.elapsed
			s.served += int64(len(res.latencies))
			if res.firstErr != nil {
				fmt.Printf("  %s: %d errors, the first: %v\n", s.name, res.errors, res.firstErr)
			}
			if s.redis {
				s.cmds += scriptCalls(rdb)
				s.reqs += int64(len(res.latencies))
			}
			s.rps = append(s.rps, res.rps())
			s.lat = append(s.lat, res.latencies...)
			s.bad += res.errors + len(res.latencies) - res.statuses[201]
			if s.group == "proxy" || s.group == "caddy" {
				if s.replay {
					s.bad += len(res.latencies) - res.replayed
				} else {
					s.bad += res.replayed
				}
			}
			fmt.Printf("round %d  %-40s %9.0f req/s\n", round+1, s.name, res.rps())
		}
	}
	conflictCmds := measureConflict(redURL, rdb)
	report(cfg, scenarios, conflictCmds)
	if cfg.flood > 0 {
		if err := flood(cfg, dir, idemproxy, upURL); err != nil {
			return err
		}
	}
	return nil
}

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
	fmt.Printf("\n%d rounds × %d requests per scenario, %d connections; server under test on core 1, load generator + upstream + Redis on core 0\n\n",
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

	// Where the CPU went, per request, and how busy each core was: a core near
	// 100% is what limited a scenario.
	fmt.Println("\nCPU per request (µs, from /proc and getrusage over every round) and core utilisation:")
	fmt.Println()
	fmt.Println("| scenario | server under test (core 1) | upstream | Redis | load generator | core 1 busy | core 0 busy |")
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
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s |\n", s.name, per(s.cpuServer), per(up), per(s.cpuRedis), per(s.cpuLoad),
			busy(s.cpuServer), busy(up+s.cpuRedis+s.cpuLoad))
	}
}

type cpuTimes struct{ server, up, redis, load time.Duration }

func cpuSnapshot(pids map[string]int, server string) cpuTimes {
	return cpuTimes{
		server: procinfo.CPUTime(pids[server]),
		up:     procinfo.CPUTime(pids["upstream"]),
		redis:  procinfo.CPUTime(pids["redis"]),
		load:   procinfo.SelfCPUTime(),
	}
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
	p, err := start(dir, coreTest, "idemproxy-flood", idemproxy, "--listen", addr, "--upstream", upURL,
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

func caddyConfig(listen, upstream string, module bool) string {
	handlers := `{"handler":"reverse_proxy","upstreams":[{"dial":"` + upstream + `"}]}`
	if module {
		handlers = `{"handler":"idempotency","store":{"type":"memory"}},` + handlers
	}
	return `{"admin":{"disabled":true},"logging":{"logs":{"default":{"level":"WARN"}}},
"apps":{"http":{"servers":{"bench":{"listen":["` + listen + `"],"automatic_https":{"disable":true},
"routes":[{"handle":[` + handlers + `]}]}}}}}`
}
