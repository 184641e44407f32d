package main

import (
	"fmt"
	"strings"
	"time"
)

// reconcileLease and reconcileUpstreamTimeout are the reconcile rounds'
// lock_ttl and upstream_timeout: short, so that a SIGKILLed instance's keys are
// held within the round and a not-found answer can release them (no earlier
// than upstream_timeout after the claim). The upstream takes at most 2 s, well
// within upstream_timeout: an original can no longer be running when a
// not-found answer is believed.
const (
	reconcileLease           = 2 * time.Second
	reconcileUpstreamTimeout = 4 * time.Second
)

// reconcileCycle is one round of the reconcile rounds' schedule.
const reconcileCycle = 15 * time.Second

// reconcilePhase runs two rounds side by side, on Redis and on PostgreSQL: two
// instances whose route names a reconcile request (GET /lookup?key={key}: 200
// with the execution when the upstream executed the key, 404 when it never
// did), SIGKILLed mid-request in turn every 5 s, with 30% of upstream calls
// taking 0.3–2 s, abandoned (no effect) when the proxy that sent them dies;
// and windows where the upstream resets 20% of connections before acting, and
// where it acts and then resets. Every held key must settle within the round:
// resolved by reconcile when the upstream executed it (and then it ran
// exactly once), or released once it can no longer be running and confirmed
// not found (and then it had never run before the release, and runs once).
func reconcilePhase(cfg config, dir string) error {
	var rounds []round
	for _, store := range []string{"redis", "postgres"} {
		rounds = append(rounds, round{"reconcile (" + store + ")", func(name string) error { return reconcileRound(cfg, dir, name, store) }})
	}
	return parallel(rounds)
}

func reconcileRound(cfg config, dir, name, store string) error {
	h, err := newHarness(cfg, name, cfg.phaseDuration)
	if err != nil {
		return err
	}
	var url string
	switch store {
	case "redis":
		if h.redis, err = newRedis(dir, "reconcile-redis"); err != nil {
			return err
		}
		if err := h.redis.start(); err != nil {
			return err
		}
		defer h.redis.kill()
		url = "redis://" + h.redis.addr + "/0"
	case "postgres":
		db, stop, err := startPostgres()
		if err != nil {
			return err
		}
		defer stop()
		url = db.URL() + "&pool_max_conns=16"
	}
	h.reconcile, h.lease = true, reconcileLease
	for i := 0; i < 2; i++ {
		p := newProxy(dir, cfg.bin, fmt.Sprintf("idemproxy-reconcile-%s-%d", store, i), fmt.Sprintf("http://%s/r%d", h.up.addr, i), url,
			"--lock-ttl", h.lease.String(), "--upstream-timeout", reconcileUpstreamTimeout.String(),
			"--reconcile", "GET /lookup?key={key}", "--reconcile-delay", "300ms", "--reconcile-max-delay", "1s",
			"--reconcile-attempts", "30", "--reconcile-timeout", "1s", "--log-level", "info")
		if err := p.start(); err != nil {
			return err
		}
		defer p.kill()
		h.proxies, h.prefixes = append(h.proxies, p), append(h.prefixes, fmt.Sprintf("r%d", i))
	}
	h.up.inFlight.Store(true)
	h.up.abortOnCancel.Store(true)
	fmt.Printf("soak: %s: %v of load, %d clients, 2 instances on %s with reconcile: GET /lookup?key={key} (lock_ttl %v, upstream_timeout %v); an instance SIGKILLed every 5s\n",
		name, h.duration, cfg.clients, store, h.lease, reconcileUpstreamTimeout)
	err = h.run(func(start time.Time) error {
		cycle := min(h.duration, reconcileCycle)
		for t := start; !t.Add(cycle).After(h.deadline); t = t.Add(cycle) {
			at := func(frac float64) { time.Sleep(time.Until(t.Add(time.Duration(frac * float64(cycle))))) }
			mode := func(m int32, kind string, from, to float64) {
				at(from)
				f := fault{kind: kind, from: time.Now()}
				h.up.mode.Store(m)
				at(to)
				h.up.mode.Store(modeNormal)
				f.to = time.Now()
				h.faults.add(f)
			}
			for i, frac := range []float64{0.13, 0.46, 0.8} {
				at(frac)
				if err := h.sigkill(i % 2); err != nil {
					return err
				}
				switch i {
				case 0:
					mode(modeReset, "upstream-reset", 0.3, 0.4)
				case 1:
					mode(modeActReset, "upstream-act-reset", 0.63, 0.73)
				}
			}
		}
		return nil
	})
	var logged []string
	for _, outcome := range []string{"resolved", "released", "exhausted"} {
		logged = append(logged, fmt.Sprintf("%d %s", h.loggedAll("reconcile: unknown outcome settled", `"outcome":"`+outcome+`"`), outcome))
	}
	fmt.Printf("soak: %s: reconcile settlements logged by the instances: %s\n", name, strings.Join(logged, ", "))
	return err
}
