package main

import (
	"fmt"
	"os"
	"time"

	"github.com/idemproxy/idemproxy/internal/pgtest"
)

// pgRestartEvery is how often the PostgreSQL phase restarts the database.
const pgRestartEvery = 15 * time.Second

// postgresPhase runs two instances on one PostgreSQL table while the database
// is stopped at once (as a crash: it recovers from its WAL) and started again
// every 15 s. A committed claim or record survives, and a response finished
// during the outage is stored once the database is back (complete_retry). Only
// an outage longer than the lease (15 s here) can explain a double run: then a retry
// may claim the lapsed key before the pending completion lands (RELIABILITY.md,
// case 2).
func postgresPhase(cfg config, dir string) error {
	h, err := newHarness(cfg, "postgres", cfg.phaseDuration)
	if err != nil {
		return err
	}
	// Its own directory under the system's temporary one: as root, the server
	// runs as the postgres user, which cannot enter the soak's private dir.
	pgdir, err := os.MkdirTemp("", "idemproxy-soak-pg")
	if err != nil {
		return err
	}
	defer os.RemoveAll(pgdir)
	db, err := pgtest.NewCluster(pgdir)
	if err != nil {
		return err
	}
	if err := db.Start(); err != nil {
		return err
	}
	defer db.Stop()
	// A database restart (crash recovery included) takes seconds: a lease that
	// outlasts it, as an operator would choose (the default is 30s).
	h.lease = 15 * time.Second
	for i := 0; i < 2; i++ {
		p := newProxy(dir, cfg.bin, fmt.Sprintf("idemproxy-p%d", i), fmt.Sprintf("http://%s/p%d", h.up.addr, i), db.URL()+"&pool_max_conns=16",
			"--lock-ttl", h.lease.String())
		if err := p.start(); err != nil {
			return err
		}
		defer p.kill()
		h.proxies = append(h.proxies, p)
	}
	fmt.Printf("soak: postgres: %v of load, %d clients, 2 instances on one PostgreSQL (lock_ttl %v); the database stopped at once every %v, started again 1s later\n",
		h.duration, cfg.clients, h.lease, pgRestartEvery)
	return h.run(func(start time.Time) error {
		for at := start.Add(pgRestartEvery / 2); at.Before(h.deadline.Add(-3 * time.Second)); at = at.Add(pgRestartEvery) {
			time.Sleep(time.Until(at))
			from := time.Now()
			if err := db.Stop(); err != nil {
				return err
			}
			time.Sleep(time.Second)
			if err := db.Start(); err != nil {
				return err
			}
			to := time.Now()
			h.faults.add(fault{kind: "postgres-down", target: fmt.Sprintf("down %.1fs", to.Sub(from).Seconds()), from: from, to: to})
		}
		return nil
	})
}
