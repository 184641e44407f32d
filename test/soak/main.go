// Command soak proves idemproxy's promise under load and faults: a logical
// operation reaches the upstream at most once per key while its record lives, and a
// completed response is never lost while its TTL runs. `make soak` runs it.
//
// It starts a real redis-server (append-only file, fsync always: a restart keeps
// the data), three idemproxy processes sharing it, and a counting upstream in this
// process. Clients drive first requests, retries across instances, concurrent
// duplicates, mismatched payloads and hang-ups. Meanwhile a schedule SIGKILLs and
// SIGTERMs instances, shuts Redis down and restarts it, and makes the upstream slow,
// reset connections, and fail with 5xx. A checker then compares the upstream's own
// log of effects with every response the clients saw: a key that ran twice fails
// the run unless a store lost data (a Sentinel failover without wait_replicas);
// held keys (outcome unknown, a lapsed claim included) are counted by how they
// settled.
//
// Then more phases, each with its own servers and checked the same way:
// failover (two instances on Sentinel while the primary is SIGKILLed, without,
// then with wait_replicas), reload (real Caddy reloaded, and idemproxy sent SIGHUP
// with a changed store setting, every 1.5 s under load, on the memory store,
// Redis and PostgreSQL; five rounds side by side), postgres (two instances on
// PostgreSQL, the database crash-stopped for longer than the claim, instances
// SIGKILLed) and reconcile (two instances whose route reconciles held keys with
// GET /lookup?key={key}, SIGKILLed in turn, on Redis and on PostgreSQL side by
// side). SOAK_PHASES picks phases.
//
// It also runs the bad-input campaign: a million unique keys into a bounded memory
// store, hostile requests against the real binary, and tenant isolation.
//
//	SOAK_DURATION=30m make soak     # a long run (the fault schedule repeats every 100s); the default is 60s
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	var cfg config
	flag.DurationVar(&cfg.duration, "duration", envDuration("SOAK_DURATION", 60*time.Second), "load phase length (env SOAK_DURATION)")
	flag.IntVar(&cfg.clients, "clients", 24, "concurrent clients")
	flag.StringVar(&cfg.bin, "bin", "bin/idemproxy", "idemproxy binary")
	flag.IntVar(&cfg.campaignKeys, "campaign-keys", 1_000_000, "unique keys in the memory-bound campaign")
	flag.BoolVar(&cfg.skipCampaign, "skip-campaign", false, "run only the fault soak")
	flag.StringVar(&cfg.caddy, "caddy", "bin/caddy", "Caddy built with the module (make caddy), for the reload phase")
	flag.StringVar(&cfg.phases, "phases", os.Getenv("SOAK_PHASES"), "comma-separated phases to run: "+phaseNames()+" (env SOAK_PHASES; default all)")
	flag.Func("proxy-arg", "an extra argument for every idemproxy instance, repeatable (-proxy-arg=--unknown-outcome -proxy-arg=release: the checker then sees a SIGKILLed instance's keys run twice, and fails)", func(s string) error {
		proxyArgs = append(proxyArgs, s)
		return nil
	})
	flag.DurationVar(&cfg.phaseDuration, "phase-duration", envDuration("SOAK_PHASE_DURATION", 0), "load of each failover, reload, postgres and reconcile round (env SOAK_PHASE_DURATION; default a tenth of -duration, 15s to 3m)")
	flag.Parse()
	if _, err := pickPhases(cfg.phases); err != nil {
		fmt.Fprintln(os.Stderr, "soak: -phases (SOAK_PHASES):", err)
		os.Exit(2)
	}
	ok := true
	if !cfg.skipCampaign {
		if err := campaign(cfg); err != nil {
			fmt.Fprintln(os.Stderr, "soak: campaign:", err)
			ok = false
		}
	}
	if cfg.phaseDuration == 0 {
		cfg.phaseDuration = min(max(cfg.duration/10, 15*time.Second), 3*time.Minute)
	}
	if err := soak(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		ok = false
	}
	if !ok {
		os.Exit(1)
	}
	fmt.Println("soak: PASS")
}

type config struct {
	duration     time.Duration
	clients      int
	bin          string
	campaignKeys int
	skipCampaign bool
	caddy        string
	phases       string
	// phaseDuration is the load of each round of the phases after main.
	phaseDuration time.Duration
}

func envDuration(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "soak: %s=%q: %v\n", name, v, err)
			os.Exit(2)
		}
		return d
	}
	return def
}
