package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/internal/procinfo"
)

// reloadEvery is how often the reload phase reloads Caddy's config.
const reloadEvery = 1500 * time.Millisecond

// reloadPhase runs real Caddy (built with the module) in front of the upstream
// and reloads its config every 1.5 s while clients drive it, with a slow upstream
// so that operations are in flight across each reload. Two rounds: the Redis store
// (a reload closed it under running requests, which then ran twice) and the
// memory store with every setting changing on every reload (a reload swapped
// in an empty store). A reload explains no double run and no lost record.
func reloadPhase(cfg config, dir string) error {
	if _, err := os.Stat(cfg.caddy); err != nil {
		return fmt.Errorf("the reload phase needs Caddy built with the module (make caddy): %w", err)
	}
	var failed []string
	for round, store := range []string{"redis", "memory"} {
		name := "caddy-reload (" + store + ")"
		if err := reloadRound(cfg, dir, round, name, store); err != nil {
			fmt.Fprintf(os.Stderr, "soak: %s: %v\n", name, err)
			failed = append(failed, name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s", strings.Join(failed, ", "))
	}
	return nil
}

func reloadRound(cfg config, dir string, round int, name, store string) error {
	h, err := newHarness(cfg, name, cfg.phaseDuration)
	if err != nil {
		return err
	}
	storeLine := func(gen int) string { // every memory store setting changes on every reload
		return fmt.Sprintf("store memory {\n\t\t\tmax_records %d\n\t\t\tmax_bytes %dMiB\n\t\t}", 500_000+gen%2*100_000, 512+gen%2*128)
	}
	if store == "redis" {
		if h.redis, err = newRedis(dir, fmt.Sprintf("reload%d-redis", round)); err != nil {
			return err
		}
		if err := h.redis.start(); err != nil {
			return err
		}
		defer h.redis.kill()
		storeLine = func(int) string { return "store redis://" + h.redis.addr + "/0" }
	}
	site, admin := procinfo.FreeAddr(), procinfo.FreeAddr()
	cfgPath := filepath.Join(dir, fmt.Sprintf("reload%d.Caddyfile", round))
	write := func(gen int) error {
		// Each generation differs (retry_after, the memory bound), so every reload
		// provisions a new handler while the old one's requests still run.
		return os.WriteFile(cfgPath, []byte(fmt.Sprintf(`{
	admin %s
	auto_https off
	persist_config off
}
http://:%s {
	idempotency {
		%s
		lock_ttl 4s
		retry_after %ds
	}
	rewrite * /c0{uri}
	reverse_proxy %s
}
`, admin, port(site), storeLine(gen), 1+gen%2, h.up.addr)), 0o644)
	}
	if err := write(0); err != nil {
		return err
	}
	caddy := &managed{name: fmt.Sprintf("caddy-%d", round), dir: dir, addr: site,
		argv: []string{cfg.caddy, "run", "--config", cfgPath, "--adapter", "caddyfile"}}
	if err := caddy.start(); err != nil {
		return err
	}
	defer caddy.kill()
	h.proxies = []*managed{caddy}
	h.up.mode.Store(modeInFlight)
	fmt.Printf("soak: %s: %v of load, %d clients, one Caddy reloaded every %v; 30%% of upstream calls take 0.3–2 s\n",
		name, h.duration, cfg.clients, reloadEvery)
	return h.run(func(start time.Time) error {
		gen := 0
		for at := start.Add(reloadEvery); at.Before(h.deadline); at = at.Add(reloadEvery) {
			time.Sleep(time.Until(at))
			gen++
			if err := write(gen); err != nil {
				return err
			}
			from := time.Now()
			out, err := exec.Command(cfg.caddy, "reload", "--config", cfgPath, "--adapter", "caddyfile", "--address", admin).CombinedOutput()
			if err != nil {
				return fmt.Errorf("caddy reload %d: %v: %s", gen, err, out)
			}
			h.faults.add(fault{kind: "caddy-reload", target: "c0", from: from, to: time.Now()})
		}
		return nil
	})
}
