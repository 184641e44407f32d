package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/internal/faultproxy"
	"github.com/redis/go-redis/v9"
)

// replicationLag is the latency on every primary-to-replica link (a fault proxy
// in between): Redis replicates asynchronously, and on loopback the window in
// which an acknowledged write exists only on the primary is too short to see.
// 2 ms is a cross-zone link.
const replicationLag = 2 * time.Millisecond

// failoverEvery is how often a round kills its primary.
const failoverEvery = 25 * time.Second

// sentinelSet is a primary, its replica and three Sentinels (quorum 2).
type sentinelSet struct {
	dir       string
	round     int
	primary   *managed
	replica   *managed
	links     []*faultproxy.Proxy
	sentinels []*managed
	replicas  int // replicas started so far, for names
}

// failoverPhase runs two rounds on a Sentinel-managed Redis, each with a failover
// every 25 s (SIGKILL the primary under load; the Sentinels promote the replica; a
// new replica joins): one where the instances do not wait for replicas, one with
// --redis-wait-replicas 1. Double runs caused by a failover are counted, and
// allowed, only in the first; the waited round must have none.
func failoverPhase(cfg config, dir string) error {
	var failed []string
	for round, waited := range []bool{false, true} {
		name := "failover (no wait)"
		if waited {
			name = "failover (wait_replicas 1)"
		}
		if err := failoverRound(cfg, dir, round, name, waited); err != nil {
			fmt.Fprintf(os.Stderr, "soak: %s: %v\n", name, err)
			failed = append(failed, name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s", strings.Join(failed, ", "))
	}
	return nil
}

func failoverRound(cfg config, dir string, round int, name string, waited bool) error {
	h, err := newHarness(cfg, name, cfg.phaseDuration)
	if err != nil {
		return err
	}
	h.waited = waited
	set := &sentinelSet{dir: dir, round: round}
	defer set.stop()
	if err := set.start(); err != nil {
		return err
	}
	url := "redis+sentinel://" + set.sentinels[0].addr + "/0?master_name=soak"
	for _, s := range set.sentinels[1:] {
		url += "&addr=" + s.addr
	}
	url += "&dial_timeout=500ms&read_timeout=1s&write_timeout=1s&max_retries=1"
	// The soak's 4 s lease. A failover leaves a waited store unwritable until a
	// new replica joins (8–17 s here): the claims of the requests running then
	// lapse, and a client's retry that finds one once the store takes writes
	// again holds the key, until the pending completion lands and replaces the
	// held record. (When a lapsed claim freed the key, that retry ran again.)
	extra := []string{"--lock-ttl", h.lease.String()}
	if waited {
		extra = append(extra, "--redis-wait-replicas", "1", "--redis-wait-timeout", "500ms")
	}
	for i := 0; i < 2; i++ {
		p := newProxy(dir, cfg.bin, fmt.Sprintf("idemproxy-f%d-%d", round, i), fmt.Sprintf("http://%s/f%d", h.up.addr, i), url, extra...)
		if err := p.start(); err != nil {
			return err
		}
		defer p.kill()
		h.proxies = append(h.proxies, p)
	}
	fmt.Printf("soak: %s: %v of load, %d clients, 2 instances on Sentinel (primary, replica %v behind, 3 sentinels; lock_ttl %v); the primary SIGKILLed every %v\n",
		name, h.duration, cfg.clients, replicationLag, h.lease, failoverEvery)
	return h.run(func(start time.Time) error {
		for at := start.Add(min(failoverEvery, h.duration) * 2 / 5); at.Before(h.deadline.Add(-3 * time.Second)); at = at.Add(failoverEvery) {
			time.Sleep(time.Until(at))
			from := time.Now()
			promoted, err := set.failover()
			if err != nil {
				return err
			}
			// The fault lasts until a new replica is linked: waited writes fail until then.
			h.faults.add(fault{kind: "failover", target: fmt.Sprintf("promoted +%.1fs", promoted.Sub(from).Seconds()), from: from, to: time.Now()})
		}
		return nil
	})
}

func (s *sentinelSet) start() error {
	var err error
	if s.primary, err = newRedis(s.dir, fmt.Sprintf("fo%d-primary", s.round)); err != nil {
		return err
	}
	if err := s.primary.start(); err != nil {
		return err
	}
	if err := s.addReplica(); err != nil {
		return err
	}
	for i := 0; i < 3; i++ {
		sn, err := newSentinel(s.dir, fmt.Sprintf("fo%d-sentinel-%d", s.round, i), s.primary.addr)
		if err != nil {
			return err
		}
		if err := sn.start(); err != nil {
			return err
		}
		s.sentinels = append(s.sentinels, sn)
	}
	// A failover needs the Sentinels to know each other and the replica.
	return pollUntil(20*time.Second, "the Sentinels to find each other and the replica", func() bool {
		for _, sn := range s.sentinels {
			c := redis.NewSentinelClient(&redis.Options{Addr: sn.addr})
			others, _ := c.Sentinels(context.Background(), "soak").Result()
			replicas, _ := c.Replicas(context.Background(), "soak").Result()
			c.Close()
			if len(others) < 2 || len(replicas) < 1 {
				return false
			}
		}
		return true
	})
}

// addReplica starts a replica of the current primary, linked through a fault
// proxy with replicationLag, and waits for the link.
func (s *sentinelSet) addReplica() error {
	link, err := faultproxy.New(s.primary.addr)
	if err != nil {
		return err
	}
	link.SetLatency(replicationLag)
	s.links = append(s.links, link)
	s.replicas++
	r, err := newRedis(s.dir, fmt.Sprintf("fo%d-replica-%d", s.round, s.replicas), "--replicaof", "127.0.0.1", port(link.Addr()))
	if err != nil {
		return err
	}
	if err := r.start(); err != nil {
		return err
	}
	s.replica = r
	c := redis.NewClient(&redis.Options{Addr: r.addr})
	defer c.Close()
	return pollUntil(60*time.Second, "the replica's link", func() bool {
		info, _ := c.Info(context.Background(), "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
}

// failover SIGKILLs the primary, waits until the Sentinels promote the replica,
// then starts a new replica so the next failover (and a waited write) has one.
// It returns when the promotion was seen.
func (s *sentinelSet) failover() (time.Time, error) {
	old, promoted := s.primary, s.replica
	old.kill()
	c := redis.NewSentinelClient(&redis.Options{Addr: s.sentinels[0].addr})
	defer c.Close()
	if err := pollUntil(30*time.Second, "the Sentinels to promote "+promoted.addr, func() bool {
		addr, err := c.GetMasterAddrByName(context.Background(), "soak").Result()
		return err == nil && net.JoinHostPort(addr[0], addr[1]) == promoted.addr
	}); err != nil {
		return time.Time{}, err
	}
	at := time.Now()
	s.primary = promoted
	return at, s.addReplica()
}

func (s *sentinelSet) stop() {
	for _, m := range append(append([]*managed{}, s.sentinels...), s.primary, s.replica) {
		if m != nil {
			m.kill()
		}
	}
	for _, l := range s.links {
		l.Close()
	}
}

// newSentinel is a redis-server --sentinel monitoring the primary as "soak",
// declaring it down after 3 s. With 1 s, on a machine loaded by other work, the
// Sentinels once took a busy primary for dead and promoted a replica still in its
// first sync: a real failover that lost data (RELIABILITY.md case 3), not the
// fault this phase injects.
func newSentinel(dir, name, primary string) (*managed, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not on PATH (apt-get install redis-server)")
	}
	addr := listenAddr()
	sdir := filepath.Join(dir, name)
	if err := os.MkdirAll(sdir, 0o755); err != nil {
		return nil, err
	}
	host, pport, _ := net.SplitHostPort(primary)
	conf := filepath.Join(sdir, "sentinel.conf") // Sentinel rewrites it: writable
	body := fmt.Sprintf("port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor soak %s %s 2\n"+
		"sentinel down-after-milliseconds soak 3000\nsentinel failover-timeout soak 10000\n", port(addr), sdir, host, pport)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		return nil, err
	}
	return &managed{name: name, redis: true, dir: dir, addr: addr, argv: []string{bin, conf, "--sentinel"}}, nil
}

func pollUntil(d time.Duration, what string, ok func() bool) error {
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("waited %v for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}
