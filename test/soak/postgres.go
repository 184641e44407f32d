package main

import (
	"fmt"
	"os"
	"time"

	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
)

// pgRestartEvery is how often the PostgreSQL phase restarts the database, and
// pgDownFor how long it stays stopped before it starts again (then crash
// recovery): longer than the claim.
const (
	pgRestartEvery = 15 * time.Second
	pgDownFor      = 4 * time.Second
)

// startPostgres initialises and starts a throwaway PostgreSQL cluster; stop
// stops it and removes its files.
func startPostgres() (db *pgtest.Cluster, stop func(), err error) {
	// Its own directory under the system's temporary one: as root, the server
	// runs as the postgres user, which cannot enter the soak's private dir.
	pgdir, err := os.MkdirTemp("", "idemproxy-soak-pg")
	if err != nil {
		return nil, nil, err
	}
	if db, err = pgtest.NewCluster(pgdir); err == nil {
		err = db.Start()
	}
	if err != nil {
		os.RemoveAll(pgdir)
		return nil, nil, err
	}
	return db, func() { _ = db.Stop(); os.RemoveAll(pgdir) }, nil
}

// postgresPhase runs two instances on one PostgreSQL table with the main
// phase's 4 s lease, while the database is stopped at once (as a crash: it
// recovers from its WAL) and started again every 15 s, down for longer than
// the claim (4–6 s here), and the instances are SIGKILLed mid-request in
// turn. A committed claim or record survives; a response finished during the
// outage is stored once the database is back (complete_retry), replacing the
// held record a retry may have found meanwhile (its claim lapsed); a killed
// instance's keys are held. Nothing may run twice.
func postgresPhase(cfg config, dir string) error {
	h, err := newHarness(cfg, "postgres", cfg.phaseDuration)
	if err != nil {
		return err
	}
	db, stop, err := startPostgres()
	if err != nil {
		return err
	}
	defer stop()
	for i := 0; i < 2; i++ {
		p := newProxy(dir, cfg.bin, fmt.Sprintf("idemproxy-p%d", i), fmt.Sprintf("http://%s/p%d", h.up.addr, i), db.URL()+"&pool_max_conns=16")
		if err := p.start(); err != nil {
			return err
		}
		defer p.kill()
		h.proxies, h.prefixes = append(h.proxies, p), append(h.prefixes, fmt.Sprintf("p%d", i))
	}
	fmt.Printf("soak: postgres: %v of load, %d clients, 2 instances on one PostgreSQL (lock_ttl %v); the database stopped at once every %v, started again %v later; an instance SIGKILLed twice a cycle\n",
		h.duration, cfg.clients, h.lease, pgRestartEvery, pgDownFor)
	return h.run(func(start time.Time) error {
		cycle := min(h.duration, pgRestartEvery)
		for t := start; !t.Add(cycle).After(h.deadline); t = t.Add(cycle) {
			at := func(frac float64) { time.Sleep(time.Until(t.Add(time.Duration(frac * float64(cycle))))) }
			at(0.2)
			if err := h.sigkill(0); err != nil {
				return err
			}
			at(0.5)
			from := time.Now()
			if err := db.Stop(); err != nil {
				return err
			}
			time.Sleep(pgDownFor)
			if err := db.Start(); err != nil {
				return err
			}
			to := time.Now()
			h.faults.add(fault{kind: "postgres-down", target: fmt.Sprintf("down %.1fs", to.Sub(from).Seconds()), from: from, to: to})
			at(0.85)
			if err := h.sigkill(1); err != nil {
				return err
			}
		}
		return nil
	})
}
