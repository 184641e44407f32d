package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// reloadEvery is how often the reload phase reloads a configuration.
const reloadEvery = 1500 * time.Millisecond

// reloadPhase reloads configurations every 1.5 s under load, with 30% of
// upstream calls taking 0.3–2 s so that operations are in flight across each
// reload, in five rounds run side by side: real Caddy (built with the module)
// reloaded with `caddy reload` on Redis (a reload closed it under running
// requests, which then ran twice) and on the memory store with its bounds
// changing (a reload swapped in an empty store); and idemproxy reloaded with
// SIGHUP while its file changes a store setting at every reload, on the memory
// store (its bounds, applied to the running store), on Redis (the URL's
// pool_size and redis_local_cache: a new client each time) and on PostgreSQL
// (the URL's pool_max_conns, postgres_local_cache and postgres_sweep_interval:
// a new pool each time). A reload explains no double run and no lost record.
func reloadPhase(cfg config, dir string) error {
	if _, err := os.Stat(cfg.caddy); err != nil {
		return fmt.Errorf("the reload phase needs Caddy built with the module (make caddy): %w", err)
	}
	var rounds []round
	for i, store := range []string{"redis", "memory"} {
		rounds = append(rounds, round{"caddy-reload (" + store + ")", func(name string) error { return caddyReloadRound(cfg, dir, i, name, store) }})
	}
	for _, store := range []string{"memory", "redis", "postgres"} {
		rounds = append(rounds, round{"sighup (" + store + ")", func(name string) error { return sighupRound(cfg, dir, name, store) }})
	}
	return parallel(rounds)
}

func caddyReloadRound(cfg config, dir string, round int, name, store string) error {
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
	site, admin := listenAddr(), listenAddr()
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
	h.proxies, h.prefixes = []*managed{caddy}, []string{"c0"}
	h.up.inFlight.Store(true)
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

// sighupRound runs idemproxy from a config file on store (one instance on the
// memory store, two sharing Redis or PostgreSQL), rewrites the file with a
// changed store setting every 1.5 s and sends SIGHUP, under load. Each reload
// must be seen to do what it should with the store (the instances log at info):
// the memory store kept with its bounds applied, a Redis client or PostgreSQL
// pool reopened on the same server; and nothing may run twice or be lost.
func sighupRound(cfg config, dir, name, store string) error {
	h, err := newHarness(cfg, name, cfg.phaseDuration)
	if err != nil {
		return err
	}
	instances := 2
	var storeLines func(gen int) string
	switch store {
	case "memory":
		instances = 1 // the memory store is one process's
		storeLines = func(gen int) string {
			return fmt.Sprintf("store: memory\nmemory_max_records: %d\nmemory_max_bytes: %dMiB\n", 500_000+gen%2*100_000, 512+gen%2*128)
		}
	case "redis":
		if h.redis, err = newRedis(dir, "sighup-redis"); err != nil {
			return err
		}
		if err := h.redis.start(); err != nil {
			return err
		}
		defer h.redis.kill()
		storeLines = func(gen int) string {
			return fmt.Sprintf("store: redis://%s/0?pool_size=%d\nredis_local_cache: %dMiB\n", h.redis.addr, 8+gen%2*8, gen/2%2*4)
		}
	case "postgres":
		db, stop, err := startPostgres()
		if err != nil {
			return err
		}
		defer stop()
		storeLines = func(gen int) string {
			return fmt.Sprintf("store: %s&pool_max_conns=%d\npostgres_local_cache: %dMiB\npostgres_sweep_interval: %ds\n",
				db.URL(), 8+gen%2*8, gen/2%2*4, 30+gen%3*15)
		}
	}
	paths := make([]string, instances)
	write := func(gen int) error {
		for i, path := range paths {
			text := fmt.Sprintf("upstream: http://%s/h%d\nlock_ttl: 4s\n%s", h.up.addr, i, storeLines(gen))
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				return err
			}
		}
		return nil
	}
	for i := range paths {
		paths[i] = filepath.Join(dir, fmt.Sprintf("sighup-%s-%d.yaml", store, i))
	}
	if err := write(0); err != nil {
		return err
	}
	for i, path := range paths {
		// Only the file names the store and its settings: a flag would win over it
		// at every reload.
		addr, admin := listenAddr(), listenAddr()
		p := &managed{name: fmt.Sprintf("idemproxy-sighup-%s-%d", store, i), dir: dir, addr: addr,
			argv: []string{cfg.bin, "--config", path, "--listen", addr, "--admin", admin,
				"--shutdown-timeout", "15s", "--log-level", "info", "--log-format", "json"}}
		p.argv = append(p.argv, proxyArgs...)
		if err := p.start(); err != nil {
			return err
		}
		defer p.kill()
		h.proxies, h.prefixes = append(h.proxies, p), append(h.prefixes, fmt.Sprintf("h%d", i))
	}
	h.up.inFlight.Store(true)
	fmt.Printf("soak: %s: %v of load, %d clients, %d idemproxy on %s, a store setting changed and SIGHUP every %v; 30%% of upstream calls take 0.3–2 s\n",
		name, h.duration, cfg.clients, instances, store, reloadEvery)
	gen := 0
	err = h.run(func(start time.Time) error {
		for at := start.Add(reloadEvery); at.Before(h.deadline.Add(-reloadEvery / 2)); at = at.Add(reloadEvery) {
			time.Sleep(time.Until(at))
			gen++
			if err := write(gen); err != nil {
				return err
			}
			from := time.Now()
			for _, p := range h.proxies {
				if err := p.notify(syscall.SIGHUP); err != nil {
					return err
				}
			}
			h.faults.add(fault{kind: "sighup", target: store, from: from, to: time.Now()})
		}
		return nil
	})
	// Each SIGHUP reloaded, and did with the store what a change of that setting
	// should: kept the memory store with the bounds applied, reopened a shared
	// store's client or pool.
	want := `"store":"reopened"`
	if store == "memory" {
		want = "store settings applied to the running store"
	}
	var bad []string
	for _, p := range h.proxies {
		reloaded, did, refused := p.logged(`"msg":"configuration reloaded"`), p.logged(want), p.logged("configuration not reloaded")
		fmt.Printf("soak: %s: %s: %d SIGHUPs, %d reloads, %d with %s, %d refused\n", name, p.name, gen, reloaded, did, strings.Trim(want, `"`), refused)
		if reloaded != gen || did != gen || refused != 0 {
			bad = append(bad, fmt.Sprintf("%s: %d SIGHUPs, %d reloads, %d %s, %d refused", p.name, gen, reloaded, did, want, refused))
		}
	}
	if len(bad) > 0 {
		err = errors.Join(err, fmt.Errorf("reloads did not do what they should: %s", strings.Join(bad, "; ")))
	}
	return err
}
