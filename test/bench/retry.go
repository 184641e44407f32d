package main

// The retry scenario: real retries replay a key once, soon after its first
// execution (a client that lost the response), not the same keys again and
// again. Each key is executed on one of two instances sharing a store (round
// robin), replayed at once on that instance, then on the other.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// retrySteps are the three requests of a key, in order: the instance each
// goes to is first's (i%2) or the other's.
var retrySteps = [3]string{"first execution", "replay, same instance", "replay, other instance"}

// retryInstance is the instance (0 or 1) step of key i goes to.
func retryInstance(i, step int) int {
	if step == 2 {
		return (i + 1) % 2
	}
	return i % 2
}

// loadRetry sends total requests (total/3 keys, each its three steps on one
// connection, in order) over conns connections, two keep-alive connections
// each (one per instance).
func loadRetry(targets [2]string, conns, total int, prefix string) result {
	var next atomic.Int64
	keys := total / 3
	parts := make([]result, conns)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range parts {
		wg.Add(1)
		go func(p *result) {
			defer wg.Done()
			p.statuses = map[int]int{}
			var c [2]*rawConn
			for j := range c {
				u, _ := url.Parse(targets[j])
				c[j] = &rawConn{addr: u.Host}
				defer c[j].close()
			}
			head := requestHead(targets)
			req := make([]byte, 0, 512)
			for {
				i := int(next.Add(1)) - 1
				if i >= keys {
					return
				}
				for step := range 3 {
					j := retryInstance(i, step)
					req = append(append(append(req[:0], head...), "Idempotency-Key: "...), prefix...)
					req = strconv.AppendInt(req, int64(i), 10)
					req = append(append(req, "\r\n\r\n"...), benchBody...)
					t0 := time.Now()
					status, replayed, err := c[j].do(req)
					if err != nil {
						p.errors++
						if p.firstErr == nil {
							p.firstErr = err
						}
						continue
					}
					p.latencies = append(p.latencies, time.Since(t0))
					p.statuses[status]++
					if replayed != (step > 0) {
						p.errors++ // a replay that ran, or a first execution replayed
						if p.firstErr == nil {
							p.firstErr = fmt.Errorf("key %d, %s: replayed=%v", i, retrySteps[step], replayed)
						}
					}
					if replayed {
						p.replayed++
					}
				}
			}
		}(&parts[w])
	}
	wg.Wait()
	res := result{elapsed: time.Since(start), statuses: map[int]int{}}
	for _, p := range parts {
		res.latencies = append(res.latencies, p.latencies...)
		res.errors += p.errors
		res.replayed += p.replayed
		if res.firstErr == nil {
			res.firstErr = p.firstErr
		}
		for s, n := range p.statuses {
			res.statuses[s] += n
		}
	}
	return res
}

// requestHead is the bench request's head for target, up to its key. Both
// instances are sent the first one's Host, as behind one load balancer (the
// host is part of a key's scope).
func requestHead(targets [2]string) []byte {
	u, _ := url.Parse(targets[0])
	return []byte("POST " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host +
		"\r\nContent-Type: application/json\r\nAuthorization: Bearer sk_test_bench\r\nContent-Length: " +
		strconv.Itoa(len(benchBody)) + "\r\n")
}

// retryCount is a retry scenario's round trips to its store, counted on the
// wire: per key and step, and the pings (sent on their own) among them.
type retryCount struct {
	keys  int
	steps [3]int64
	pings int64
	err   error
}

// counter counts the round trips a store was sent since its last call, and
// the pings among them.
type counter interface {
	count() (trips, pings int64, err error)
	close()
}

// countRetries runs keys keys through the retry steps one request at a time
// on one connection per instance, counting each step's round trips with c. A
// ping that goes while a step runs is counted with it.
func countRetries(targets [2]string, keys int, prefix string, c counter) retryCount {
	rc := retryCount{keys: keys}
	if _, _, err := c.count(); err != nil {
		rc.err = err
		return rc
	}
	var conns [2]*rawConn
	for j := range conns {
		u, _ := url.Parse(targets[j])
		conns[j] = &rawConn{addr: u.Host}
		defer conns[j].close()
	}
	for i := range keys {
		for step := range 3 {
			j := retryInstance(i, step)
			req := append(append(requestHead(targets), "Idempotency-Key: "+prefix+strconv.Itoa(i)+"\r\n\r\n"...), benchBody...)
			status, replayed, err := conns[j].do(req)
			if err == nil && (status != 201 || replayed != (step > 0)) {
				err = fmt.Errorf("key %d, %s: status %d, replayed %v", i, retrySteps[step], status, replayed)
			}
			if err != nil {
				rc.err = err
				return rc
			}
			trips, pings, err := c.count()
			if err != nil {
				rc.err = err
				return rc
			}
			rc.steps[step] += trips
			rc.pings += pings
		}
	}
	return rc
}

// redisMonitor counts with MONITOR the commands clients send to Redis (not
// those a script runs): after each step, a marker (ECHO) on a client of its
// own, read back, closes the count.
type redisMonitor struct {
	conn, mark net.Conn
	r, mr      *bufio.Reader
	seq        int
}

func newRedisMonitor(addr string) (*redisMonitor, error) {
	m := &redisMonitor{}
	var err error
	if m.conn, err = net.Dial("tcp", addr); err != nil {
		return nil, err
	}
	if m.mark, err = net.Dial("tcp", addr); err != nil {
		m.conn.Close()
		return nil, err
	}
	m.r, m.mr = bufio.NewReaderSize(m.conn, 1<<16), bufio.NewReader(m.mark)
	if _, err := m.conn.Write([]byte("MONITOR\r\n")); err != nil {
		m.close()
		return nil, err
	}
	if line, err := m.r.ReadString('\n'); err != nil || line != "+OK\r\n" {
		m.close()
		return nil, fmt.Errorf("MONITOR: %q, %v", line, err)
	}
	return m, nil
}

func (m *redisMonitor) count() (trips, pings int64, err error) {
	m.seq++
	mark := "idemproxy-bench-mark-" + strconv.Itoa(m.seq)
	if _, err := fmt.Fprintf(m.mark, "ECHO %s\r\n", mark); err != nil {
		return 0, 0, err
	}
	if _, err := m.mr.ReadString('\n'); err != nil {
		return 0, 0, err
	}
	for {
		line, err := m.r.ReadString('\n')
		if err != nil {
			return 0, 0, err
		}
		open, end := strings.Index(line, "["), strings.Index(line, "]")
		if open < 0 || end < open {
			return 0, 0, fmt.Errorf("MONITOR line %q", line)
		}
		name, _, _ := strings.Cut(strings.TrimSpace(line[end+1:]), " ")
		name = strings.ToLower(strings.Trim(name, `"`))
		switch {
		case strings.Contains(line, `"`+mark+`"`):
			return trips, pings, nil
		case strings.Contains(line[open+1:end], "lua"):
		case name == "echo" && strings.Contains(line, "idemproxy-bench-mark-"):
		default:
			trips++
			if name == "publish" {
				pings++
			}
		}
	}
}

func (m *redisMonitor) close() {
	m.conn.Close()
	m.mark.Close()
}

// pgStatements counts with pg_stat_statements the statements clients ran (one
// at a time, each is a round trip), its tracking on only while it counts.
type pgStatements struct{ conn *pgx.Conn }

// pingStatement is how the PostgreSQL store sends a ping on its own.
const pingStatement = "SELECT pg_notify($1, $2)"

func newPGStatements(ctx context.Context, url string) (*pgStatements, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	for _, sql := range []string{"CREATE EXTENSION IF NOT EXISTS pg_stat_statements",
		"ALTER SYSTEM SET pg_stat_statements.track = 'top'", "SELECT pg_reload_conf()"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			conn.Close(ctx)
			return nil, fmt.Errorf("%s: %w", sql, err)
		}
	}
	time.Sleep(100 * time.Millisecond) // every backend reloads its settings
	return &pgStatements{conn: conn}, nil
}

func (p *pgStatements) count() (trips, pings int64, err error) {
	ctx := context.Background()
	err = p.conn.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint,
	coalesce(sum(calls) FILTER (WHERE query = $1), 0)::bigint
FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%'`, pingStatement).Scan(&trips, &pings)
	if err != nil {
		return 0, 0, err
	}
	_, err = p.conn.Exec(ctx, "SELECT pg_stat_statements_reset()")
	return trips, pings, err
}

func (p *pgStatements) close() {
	ctx := context.Background()
	_, _ = p.conn.Exec(ctx, "ALTER SYSTEM SET pg_stat_statements.track = 'none'")
	_, _ = p.conn.Exec(ctx, "SELECT pg_reload_conf()")
	p.conn.Close(ctx)
}
