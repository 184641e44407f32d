package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"

	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
	"github.com/idemproxy/idemproxy/internal/procinfo"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

type benchConfig struct {
	requests, rounds, conns, flood int
	bin                            string
	skipCaddy                      bool
	only                           *regexp.Regexp // nil: every scenario
	// peers: other idempotency proxies run side by side with idemproxy's
	// memory store, NAME → a binary that takes --listen ADDR --upstream URL
	// (test/bench/peers builds them).
	peers []peer
	// builds: other idemproxy builds (an older commit's), run beside this
	// one on memory, Redis and PostgreSQL, first executions and replays.
	builds []peer
}

type peer struct{ name, bin string }

type proc struct {
	name string
	cmd  *exec.Cmd
}

// Cores: the server under test gets core 1 to itself; everything else shares core 0.
const (
	coreEnv  = "0"
	coreTest = "1"
)

// start runs argv on core; env, when not nil, is added to the environment.
func start(dir, core, name string, env []string, argv ...string) (*proc, error) {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("taskset", append([]string{"-c", core}, argv...)...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
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
	store  string // "redis" or "postgres": whose CPU the store column counts
	// retry: each key executed on target or peer (round robin), replayed on
	// that instance, then on the other (loadRetry); counted, its round trips
	// on the wire (countRetries).
	retry   bool
	peer    string // the retry scenario's second instance: its URL
	counter func() (counter, error)
	counted retryCount
	group   string // "proxy" or "caddy": what the ratio is against
	slow    int    // > 0: send requests/slow per round (DynamoDB Local)
	rps     []float64
	lat     []time.Duration
	bad     int // answers of the wrong kind (not 201, or replayed when it should not be, …)
	cmds    int64
	reqs    int64
	// CPU accounting: server is the process under test (core 1); the upstream,
	// the store (Redis, PostgreSQL) and the load generator share core 0.
	server, peerServer         string
	cpuServer, cpuUp, cpuStore time.Duration
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
	var env []string // for the next launch only
	launch := func(core, name, addr string, argv ...string) (string, error) {
		p, err := start(dir, core, name, env, argv...)
		env = nil
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
	// The peers, on their memory stores: first executions and replays beside
	// idemproxy's, in the same rounds.
	var peerScenarios []*scenario
	for _, p := range cfg.peers {
		addr := procinfo.FreeAddr()
		server := "peer-" + p.name
		u, err := launch(coreTest, server, addr, p.bin, "--listen", addr, "--upstream", upURL)
		if err != nil {
			return err
		}
		peerScenarios = append(peerScenarios,
			&scenario{name: p.name + " memory: first executions", target: u, group: "proxy", server: server},
			&scenario{name: p.name + " memory: replays", target: u, replay: true, group: "proxy", server: server})
	}
	// PostgreSQL on core 0 with Redis: its own cluster in a temporary directory
	// (as the postgres user when root), the postmaster and every backend pinned.
	pgdir, err := os.MkdirTemp("", "idemproxy-bench-pg")
	if err != nil {
		return err
	}
	defer os.RemoveAll(pgdir)
	pg, err := pgtest.NewCluster(pgdir)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	pg.Durable = true // default durability: fsync on, synchronous commits
	if err := pg.Start(); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer pg.Stop()
	// pg_stat_statements counts the retry scenario's statements; it is loaded
	// at start, and tracks nothing but while it counts.
	statsLoaded, err := loadStatStatements(pg)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	pids["postgres"] = pg.PID()
	if out, err := exec.Command("taskset", "-a", "-p", "-c", coreEnv, fmt.Sprint(pg.PID())).CombinedOutput(); err != nil {
		return fmt.Errorf("pinning postgres: %v: %s", err, out)
	}
	pgAddr := procinfo.FreeAddr()
	pgURL, err := launch(coreTest, "idemproxy-postgres", pgAddr, idemproxy, "--listen", pgAddr, "--upstream", upURL,
		"--store", pg.URL()+"&pool_max_conns=32", "--log-level", "warn")
	if err != nil {
		return err
	}
	red := procinfo.FreeAddr()
	redURL, err := launch(coreTest, "idemproxy-redis", red, idemproxy, "--listen", red, "--upstream", upURL,
		"--store", "redis://"+redisAddr+"/0?pool_size=64", "--log-level", "warn")
	if err != nil {
		return err
	}
	// The retry scenario's second instances, one per shared store.
	peers := map[string]string{}
	for _, c := range []struct{ store, url string }{
		{"redis", "redis://" + redisAddr + "/0?pool_size=64"},
		{"postgres", pg.URL() + "&pool_max_conns=32"},
	} {
		addr := procinfo.FreeAddr()
		u, err := launch(coreTest, "idemproxy-"+c.store+"-b", addr, idemproxy, "--listen", addr, "--upstream", upURL,
			"--store", c.url, "--log-level", "warn")
		if err != nil {
			return err
		}
		peers[c.store] = u
	}
	// The other builds, on the same stores, each on an instance of its own.
	var buildScenarios []*scenario
	for _, b := range cfg.builds {
		for _, c := range []struct{ name, store, url string }{
			{"memory", "memory", ""},
			{"Redis", "redis", "redis://" + redisAddr + "/0?pool_size=64"},
			{"PostgreSQL", "postgres", pg.URL() + "&pool_max_conns=32"},
		} {
			addr := procinfo.FreeAddr()
			server := "build-" + b.name + "-" + c.store
			argv := []string{b.bin, "--listen", addr, "--upstream", upURL, "--log-level", "warn"}
			if c.url != "" {
				argv = append(argv, "--store", c.url)
			}
			u, err := launch(coreTest, server, addr, argv...)
			if err != nil {
				return err
			}
			st := c.store
			if st == "memory" {
				st = ""
			}
			buildScenarios = append(buildScenarios,
				&scenario{name: b.name + " " + c.name + ": first executions", target: u, redis: st == "redis", store: st, group: "proxy", server: server},
				&scenario{name: b.name + " " + c.name + ": replays", target: u, replay: true, redis: st == "redis", store: st, group: "proxy", server: server})
		}
	}
	scenarios := []*scenario{
		{name: "upstream directly", target: directURL, group: "ref", server: "upstream-direct"},
		{name: "bare httputil.ReverseProxy", target: bareURL, group: "proxy-base", server: "bareproxy"},
		{name: "idemproxy memory: first executions", target: memURL, group: "proxy", server: "idemproxy-memory"},
		{name: "idemproxy memory: replays", target: memURL, replay: true, group: "proxy", server: "idemproxy-memory"},
	}
	scenarios = append(scenarios, peerScenarios...)
	scenarios = append(scenarios, buildScenarios...)
	scenarios = append(scenarios, []*scenario{
		{name: "idemproxy Redis: first executions", target: redURL, redis: true, store: "redis", group: "proxy", server: "idemproxy-redis"},
		{name: "idemproxy Redis: replays", target: redURL, replay: true, redis: true, store: "redis", group: "proxy", server: "idemproxy-redis"},
		{name: "idemproxy PostgreSQL: first executions", target: pgURL, store: "postgres", group: "proxy", server: "idemproxy-postgres"},
		{name: "idemproxy PostgreSQL: replays", target: pgURL, replay: true, store: "postgres", group: "proxy", server: "idemproxy-postgres"},
		{name: "idemproxy Redis: retries (2 instances)", target: redURL, peer: peers["redis"], retry: true, redis: true, store: "redis",
			group: "proxy", server: "idemproxy-redis", peerServer: "idemproxy-redis-b",
			counter: func() (counter, error) { return newRedisMonitor(redisAddr) }},
		{name: "idemproxy PostgreSQL: retries (2 instances)", target: pgURL, peer: peers["postgres"], retry: true, store: "postgres",
			group: "proxy", server: "idemproxy-postgres", peerServer: "idemproxy-postgres-b",
			counter: func() (counter, error) {
				if !statsLoaded {
					return nil, fmt.Errorf("pg_stat_statements is not installed")
				}
				return newPGStatements(context.Background(), pg.URL())
			}},
	}...)
	// PostgreSQL's durability trade-offs, documented options, off by default
	// (docs/stores.md, "Durability trade-offs"): synchronous_commit off, and a
	// table the operator made unlogged. First executions only: a replay
	// writes nothing either way.
	if err := pgExec(context.Background(), pg.URL(), "CREATE UNLOGGED TABLE IF NOT EXISTS bench_unlogged (LIKE idemproxy_records INCLUDING ALL)"); err != nil {
		return fmt.Errorf("postgres: the unlogged table: %w", err)
	}
	for _, c := range []struct {
		name, server string
		args         []string
	}{
		{"PostgreSQL, synchronous_commit off", "idemproxy-postgres-async", []string{"--postgres-synchronous-commit", "off"}},
		{"PostgreSQL, unlogged table", "idemproxy-postgres-unlogged", []string{"--postgres-table", "bench_unlogged"}},
	} {
		addr := procinfo.FreeAddr()
		u, err := launch(coreTest, c.server, addr, append([]string{idemproxy, "--listen", addr, "--upstream", upURL,
			"--store", pg.URL() + "&pool_max_conns=32", "--log-level", "warn"}, c.args...)...)
		if err != nil {
			return err
		}
		scenarios = append(scenarios, &scenario{name: "idemproxy " + c.name + ": first executions", target: u, store: "postgres", group: "proxy", server: c.server})
	}
	// The stores above run every setting at its default, so their local cache
	// of completed records is on (redis_local_cache, postgres_local_cache:
	// auto). The same stores with it off: their own instances, replays only
	// (a first execution is the same either way).
	for _, c := range []struct{ name, store, url string }{
		{"Redis", "redis", "redis://" + redisAddr + "/0?pool_size=64"},
		{"PostgreSQL", "postgres", pg.URL() + "&pool_max_conns=32"},
	} {
		addr := procinfo.FreeAddr()
		server := "idemproxy-" + c.store + "-nocache"
		u, err := launch(coreTest, server, addr, idemproxy, "--listen", addr, "--upstream", upURL,
			"--store", c.url, "--"+c.store+"-local-cache", "off", "--log-level", "warn")
		if err != nil {
			return err
		}
		scenarios = append(scenarios, &scenario{name: "idemproxy " + c.name + ", local cache off: replays", target: u, replay: true,
			redis: c.store == "redis", store: c.store, group: "proxy", server: server})
	}
	// DynamoDB Local, when its jar is installed (cache/dynamostore/dynamotest finds
	// it): ratios only, DynamoDB Local is not DynamoDB.
	if ddb, err := startDynamoDBLocal(launch); err != nil {
		fmt.Println("DynamoDB Local scenarios left out:", err)
	} else {
		addr := procinfo.FreeAddr()
		env = ddb.environ(dir)
		u, err := launch(coreTest, "idemproxy-dynamodb", addr, idemproxy, "--listen", addr, "--upstream", upURL,
			"--store", "dynamodb://bench", "--log-level", "warn")
		if err != nil {
			return err
		}
		scenarios = append(scenarios,
			&scenario{name: "idemproxy DynamoDB Local: first executions", target: u, store: "dynamodb", group: "proxy", server: "idemproxy-dynamodb", slow: 10},
			&scenario{name: "idemproxy DynamoDB Local: replays", target: u, replay: true, store: "dynamodb", group: "proxy", server: "idemproxy-dynamodb", slow: 10})
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

	if cfg.only != nil {
		kept := scenarios[:0]
		for _, s := range scenarios {
			if s.group == "ref" || s.group == "proxy-base" || s.group == "caddy-base" || cfg.only.MatchString(s.name) {
				kept = append(kept, s)
			}
		}
		scenarios = kept
	}

	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	replayKey := keyCycle("replay-", 256)

	fmt.Printf("warming up %d scenarios…\n", len(scenarios))
	for si, s := range scenarios {
		if s.retry {
			loadRetry([2]string{s.target, s.peer}, cfg.conns, 3000, fmt.Sprintf("warm-%d-", si))
			continue
		}
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
			cpu0 := cpuSnapshot(pids, s)
			n := cfg.requests
			if s.slow > 0 {
				n = max(n/s.slow, cfg.conns)
			}
			var res result
			if s.retry {
				res = loadRetry([2]string{s.target, s.peer}, cfg.conns, n, fmt.Sprintf("r-%d-%d-", round, si))
			} else {
				res = load(s.target, cfg.conns, n, key)
			}
			cpu1 := cpuSnapshot(pids, s)
			s.cpuServer += cpu1.server - cpu0.server
			s.cpuUp += cpu1.up - cpu0.up
			s.cpuStore += cpu1.store - cpu0.store
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
			if s.retry {
				s.bad += 2*len(res.latencies)/3 - res.replayed
			} else if s.group == "proxy" || s.group == "caddy" {
				if s.replay {
					s.bad += len(res.latencies) - res.replayed
				} else {
					s.bad += res.replayed
				}
			}
			fmt.Printf("round %d  %-40s %9.0f req/s\n", round+1, s.name, res.rps())
		}
	}
	for si, s := range scenarios {
		if s.counter == nil {
			continue
		}
		c, err := s.counter()
		if err != nil {
			s.counted.err = err
			continue
		}
		s.counted = countRetries([2]string{s.target, s.peer}, retryCountKeys, fmt.Sprintf("counted-%d-", si), c)
		c.close()
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

func caddyConfig(listen, upstream string, module bool) string {
	handlers := `{"handler":"reverse_proxy","upstreams":[{"dial":"` + upstream + `"}]}`
	if module {
		handlers = `{"handler":"idempotency","store":{"type":"memory"}},` + handlers
	}
	return `{"admin":{"disabled":true},"logging":{"logs":{"default":{"level":"WARN"}}},
"apps":{"http":{"servers":{"bench":{"listen":["` + listen + `"],"automatic_https":{"disable":true},
"routes":[{"handle":[` + handlers + `]}]}}}}}`
}

// pgExec runs one statement on the database at url.
func pgExec(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// retryCountKeys is how many keys the retry scenarios' count of round trips
// sends, one request at a time.
const retryCountKeys = 200

// loadStatStatements loads pg_stat_statements into the cluster (a restart),
// tracking nothing until a count turns it on; false when it is not installed.
func loadStatStatements(pg *pgtest.Cluster) (bool, error) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.URL())
	if err != nil {
		return false, err
	}
	var available bool
	err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_stat_statements')").Scan(&available)
	if err == nil && available {
		_, err = conn.Exec(ctx, "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
	}
	conn.Close(ctx)
	if err != nil || !available {
		return false, err
	}
	if err := pg.Stop(); err != nil {
		return false, err
	}
	if err := pg.Start(); err != nil {
		return false, err
	}
	// Known once the library is loaded.
	if err := pgExec(ctx, pg.URL(), "ALTER SYSTEM SET pg_stat_statements.track = 'none'"); err != nil {
		return false, err
	}
	return true, pgExec(ctx, pg.URL(), "SELECT pg_reload_conf()")
}
