package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The load generator speaks HTTP/1.1 on raw keep-alive connections: each
// connection's request bytes are built once and only the key changes, and the
// response is parsed in place (status, Content-Length or chunked, and the two
// headers the benchmark checks). It costs a fraction of net/http's client, so the
// load generator on core 0 leaves the upstream and Redis their share of it and
// is not what limits the fast scenarios (replays, the upstream directly).

// keyFunc appends request i's Idempotency-Key to dst; an empty result sends none.
type keyFunc func(dst []byte, i int) []byte

// keyPrefix names request i prefix+i.
func keyPrefix(prefix string) keyFunc {
	return func(dst []byte, i int) []byte {
		return strconv.AppendInt(append(dst, prefix...), int64(i), 10)
	}
}

// keyCycle names request i prefix+(i mod n): n keys, repeated.
func keyCycle(prefix string, n int) keyFunc {
	return func(dst []byte, i int) []byte {
		return strconv.AppendInt(append(dst, prefix...), int64(i%n), 10)
	}
}

// keyConst sends the same key with every request.
func keyConst(k string) keyFunc {
	return func(dst []byte, _ int) []byte { return append(dst, k...) }
}

// result of one load run.
type result struct {
	latencies []time.Duration
	elapsed   time.Duration
	statuses  map[int]int
	errors    int
	replayed  int
	firstErr  error
}

func (r result) rps() float64 { return float64(len(r.latencies)) / r.elapsed.Seconds() }

var benchBody = []byte(`{"amount":100,"currency":"eur","source":"tok_visa"}`)

// load sends total POSTs to target over conns keep-alive connections. Each
// connection records its own latencies.
func load(target string, conns, total int, key keyFunc) result {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return result{errors: total, firstErr: fmt.Errorf("target %q: not an http URL", target), elapsed: time.Nanosecond}
	}
	head := []byte("POST " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host +
		"\r\nContent-Type: application/json\r\nAuthorization: Bearer sk_test_bench\r\nContent-Length: " +
		strconv.Itoa(len(benchBody)) + "\r\n")
	var next atomic.Int64
	type part struct {
		lat      []time.Duration
		statuses map[int]int
		errors   int
		replayed int
		firstErr error
	}
	parts := make([]part, conns)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range parts {
		wg.Add(1)
		go func(p *part) {
			defer wg.Done()
			p.lat = make([]time.Duration, 0, total/conns+1)
			p.statuses = map[int]int{}
			c := &rawConn{addr: u.Host}
			defer c.close()
			req := make([]byte, 0, 512)
			for {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				req = append(req[:0], head...)
				n := len(req)
				req = append(req, "Idempotency-Key: "...)
				k := len(req)
				if req = key(req, i); len(req) == k {
					req = req[:n] // no key: no header
				} else {
					req = append(req, "\r\n"...)
				}
				req = append(append(req, "\r\n"...), benchBody...)
				t0 := time.Now()
				status, replayed, err := c.do(req)
				if err != nil {
					p.errors++
					if p.firstErr == nil {
						p.firstErr = err
					}
					continue
				}
				p.lat = append(p.lat, time.Since(t0))
				p.statuses[status]++
				if replayed {
					p.replayed++
				}
			}
		}(&parts[w])
	}
	wg.Wait()
	res := result{elapsed: time.Since(start), statuses: map[int]int{}}
	for _, p := range parts {
		res.latencies = append(res.latencies, p.lat...)
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

// rawConn is one keep-alive connection, redialled after an error or a
// "Connection: close".
type rawConn struct {
	addr string
	c    net.Conn
	r    *bufio.Reader
}

func (c *rawConn) close() {
	if c.c != nil {
		c.c.Close()
		c.c = nil
	}
}

var errMalformed = errors.New("malformed HTTP response")

// do writes one request and reads its response, discarding the body. On any
// error the connection is closed, so the next request starts a fresh one.
func (c *rawConn) do(req []byte) (status int, replayed bool, err error) {
	if c.c == nil {
		conn, err := net.DialTimeout("tcp", c.addr, 5*time.Second)
		if err != nil {
			return 0, false, err
		}
		c.c = conn
		if c.r == nil {
			c.r = bufio.NewReaderSize(conn, 64<<10)
		} else {
			c.r.Reset(conn)
		}
	}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	_ = c.c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.c.Write(req); err != nil {
		return 0, false, err
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, false, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, false, fmt.Errorf("%w: status line %q", errMalformed, line)
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, false, fmt.Errorf("%w: status line %q", errMalformed, line)
	}
	length, chunked, closeAfter := -1, false, false
	for {
		line, err = c.r.ReadSlice('\n')
		if err != nil {
			return 0, false, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, false, fmt.Errorf("%w: header line %q", errMalformed, line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return 0, false, fmt.Errorf("%w: Content-Length %q", errMalformed, value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.Contains(bytes.ToLower(value), []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			closeAfter = bytes.EqualFold(value, []byte("close"))
		case bytes.EqualFold(name, []byte("Idempotent-Replayed")), bytes.EqualFold(name, []byte("Idempotency-Replayed")): // Stripe's, and idemlease's
			replayed = string(value) == "true"
		}
	}
	switch {
	case chunked:
		err = c.discardChunked()
	case length >= 0:
		_, err = c.r.Discard(length)
	default: // the body runs to the end of the connection
		_, err = io.Copy(io.Discard, c.r)
		closeAfter = true
	}
	if err != nil {
		return 0, false, err
	}
	if closeAfter {
		c.close()
	}
	return status, replayed, nil
}

func (c *rawConn) discardChunked() error {
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%w: chunk size %q", errMalformed, line)
		}
		if n == 0 { // trailers, then the empty line
			for {
				t, err := c.r.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(bytes.TrimRight(t, "\r\n")) == 0 {
					return nil
				}
			}
		}
		if _, err := c.r.Discard(int(n) + 2); err != nil {
			return err
		}
	}
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return sorted[i]
}

func sortedCopy(d []time.Duration) []time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s
}
