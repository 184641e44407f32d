// Command bench is idemproxy's load benchmark. `make bench` runs it:
//
//	taskset -c 0 bin/bench [-requests N] [-rounds R] [-conns C]
//
// It starts, each as its own process: a trivial upstream, a bare
// httputil.ReverseProxy with idemproxy's transport settings (the ceiling for a Go
// proxy), idemproxy on the memory store, on Redis and on PostgreSQL (at their
// defaults, so with the local cache of completed records; and for replays also
// with it off), on DynamoDB Local
// when its jar is installed (cache/dynamostore/dynamotest finds it;
// IDEMPROXY_DYNAMODB_LOCAL_JAR), and Caddy with and without the idempotency
// module. The server under test runs on core 1; the load generator
// (this process), the upstream and Redis share core 0 (taskset). Scenarios run
// interleaved, round by round (A B C … A B C …), so drift on a noisy machine hits
// them all alike; throughput is the median over rounds, latency percentiles pool
// every request. -peer NAME=BINARY adds another idempotency proxy's memory
// scenarios, -build NAME=BINARY another idemproxy build's on memory, Redis and
// PostgreSQL (test/bench/peers builds both), in the same rounds.
//
// Subcommands used for the helper processes: `bench upstream`, `bench bareproxy`;
// and `bench load -target URL [-replay]` to drive one server by hand (profiling).
package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "upstream":
			upstreamMain(os.Args[2:])
			return
		case "bareproxy":
			bareProxyMain(os.Args[2:])
			return
		case "load":
			loadMain(os.Args[2:])
			return
		}
	}
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	cfg := benchConfig{}
	fs.IntVar(&cfg.requests, "requests", 20000, "requests per scenario per round")
	fs.IntVar(&cfg.rounds, "rounds", 5, "rounds (each runs every scenario once)")
	fs.IntVar(&cfg.conns, "conns", 32, "concurrent keep-alive connections")
	fs.StringVar(&cfg.bin, "bin", "bin", "directory with idemproxy and caddy")
	fs.BoolVar(&cfg.skipCaddy, "skip-caddy", false, "leave out the Caddy scenarios")
	fs.IntVar(&cfg.flood, "flood", 300000, "unique keys sent in the memory-bound flood (0: skip)")
	fs.Func("peer", "NAME=BINARY: run another idempotency proxy (on its memory store; it takes --listen and --upstream) beside idemproxy's memory scenarios; repeatable (test/bench/peers builds one)", namedBinary(&cfg.peers))
	fs.Func("build", "NAME=BINARY: run another idemproxy build (an older commit's) beside this one on memory, Redis and PostgreSQL, first executions and replays, in the same rounds; repeatable", namedBinary(&cfg.builds))
	only := fs.String("only", "", "run only the scenarios whose names match this regular expression (the upstream and the bare proxy, the references, always run)")
	_ = fs.Parse(os.Args[1:])
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -only:", err)
			os.Exit(2)
		}
		cfg.only = re
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// namedBinary parses a NAME=BINARY flag, appending it to dst.
func namedBinary(dst *[]peer) func(string) error {
	return func(v string) error {
		name, bin, ok := strings.Cut(v, "=")
		if !ok || name == "" || bin == "" {
			return fmt.Errorf("want NAME=BINARY, got %q", v)
		}
		*dst = append(*dst, peer{name: name, bin: bin})
		return nil
	}
}

func loadMain(args []string) {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	target := fs.String("target", "", "URL to POST to")
	n := fs.Int("requests", 50000, "requests")
	conns := fs.Int("conns", 32, "connections")
	replay := fs.Bool("replay", false, "repeat 256 keys (replays) instead of unique keys")
	noKey := fs.Bool("no-key", false, "send no Idempotency-Key (the request passes through)")
	_ = fs.Parse(args)
	key := keyPrefix(fmt.Sprintf("load-%d-", os.Getpid()))
	if *replay {
		key = keyCycle("replay-", 256)
	}
	if *noKey {
		key = func(dst []byte, _ int) []byte { return dst }
	}
	res := load(*target, *conns, *n, key)
	lat := sortedCopy(res.latencies)
	fmt.Printf("%.0f req/s, p50 %v, p99 %v, statuses %v, replayed %d, errors %d\n",
		res.rps(), percentile(lat, 0.5), percentile(lat, 0.99), res.statuses, res.replayed, res.errors)
	if res.firstErr != nil {
		fmt.Println("first error:", res.firstErr)
	}
}
