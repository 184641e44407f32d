package proxy_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// writeCert writes a self-signed certificate for 127.0.0.1 named cn and its key
// to cert and key.
func writeCert(t *testing.T, cert, key, cn string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// tlsClient is a client of the proxy's TLS listener, HTTP/2 or HTTP/1.1 only.
func tlsClient(h2 bool) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

type tlsAnswer struct {
	status int
	proto  string
	cn     string
	body   string
	err    error
}

func tlsPost(c *http.Client, addr, path, key string, body io.Reader, header ...string) tlsAnswer {
	req, err := http.NewRequest("POST", "https://"+addr+path, body)
	if err != nil {
		return tlsAnswer{err: err}
	}
	req.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return tlsAnswer{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return tlsAnswer{status: resp.StatusCode, proto: resp.Proto, cn: resp.TLS.PeerCertificates[0].Subject.CommonName, body: string(b)}
}

// With tls_cert and tls_key the listener serves HTTPS, HTTP/2 and HTTP/1.1;
// SIGHUP serves the certificate the files hold now; a broken pair keeps the
// old one.
func TestE2ETLSAndCertificateReload(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeCert(t, cert, key, "first")
	p := start(t, "--upstream", up.URL, "--tls-cert", cert, "--tls-key", key)
	for _, h2 := range []bool{true, false} {
		r := tlsPost(tlsClient(h2), p.Addr, "/charges", fmt.Sprint("k-", h2), strings.NewReader("x"))
		want := map[bool]string{true: "HTTP/2.0", false: "HTTP/1.1"}[h2]
		if r.err != nil || r.status != 201 || r.proto != want || r.cn != "first" {
			t.Fatalf("h2=%v: %+v", h2, r)
		}
	}
	if r := tlsPost(tlsClient(true), p.Addr, "/charges", "k-true", strings.NewReader("x")); r.status != 201 || up.Count("k-true") != 1 {
		t.Fatalf("replay over HTTP/2: %+v, executions %d", r, up.Count("k-true"))
	}
	writeCert(t, cert, key, "second")
	p.Signal(t, syscall.SIGHUP)
	waitLog(t, p, `"msg":"configuration reloaded"`, 1)
	if r := tlsPost(tlsClient(true), p.Addr, "/charges", "k2", strings.NewReader("x")); r.err != nil || r.cn != "second" {
		t.Fatalf("after SIGHUP: %+v, want the new certificate", r)
	}
	if err := os.WriteFile(key, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.Signal(t, syscall.SIGHUP)
	waitLog(t, p, "configuration not reloaded", 1)
	if r := tlsPost(tlsClient(true), p.Addr, "/charges", "k3", strings.NewReader("x")); r.err != nil || r.cn != "second" {
		t.Fatalf("after a broken key: %+v, want the certificate kept", r)
	}
}

// HTTP/2 has the limits HTTP/1.1 has: an oversized body is 413, a stalled
// body is cut off by body_read_timeout, a body past the budget is 503, an
// oversized header block is refused.
func TestE2ETLSHTTP2Limits(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeCert(t, cert, key, "limits")
	p := start(t, "--upstream", up.URL, "--tls-cert", cert, "--tls-key", key,
		"--max-request-body", "1MiB", "--body-budget", "1MiB", "--body-read-timeout", "1s")
	var refused []string
	for _, h2 := range []bool{true, false} {
		c := tlsClient(h2)
		name := map[bool]string{true: "HTTP/2", false: "HTTP/1.1"}[h2]
		if r := tlsPost(c, p.Addr, "/pay", "big-"+name, strings.NewReader(strings.Repeat("b", 2<<20))); r.status != 413 {
			t.Errorf("%s: a 2 MiB body: %+v, want 413", name, r)
		}
		pr, pw := io.Pipe()
		go func() { _, _ = pw.Write([]byte("0123456789")) }() // then stalls
		began := time.Now()
		r := tlsPost(c, p.Addr, "/pay", "slow-"+name, pr)
		pw.Close()
		if r.err == nil && r.status != 400 || time.Since(began) > 10*time.Second {
			t.Errorf("%s: a stalled body: %+v after %v, want 400 (or the stream ended) within seconds", name, r, time.Since(began))
		}
		// A holds 900 KiB of the budget; 600 KiB declared beside it is 503.
		// A holder refused because a 600 KiB request came first comes again.
		hold := func() (*io.PipeWriter, chan error) {
			hr, hw := io.Pipe()
			held := make(chan error, 1)
			go func() {
				req, _ := http.NewRequest("POST", "https://"+p.Addr+"/pay", hr)
				req.ContentLength = 900 << 10
				req.Header.Set("Idempotency-Key", "hold-"+name)
				resp, err := c.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				held <- err
			}()
			go func() { _, _ = hw.Write([]byte("0123456789")) }()
			return hw, held
		}
		hw, held := hold()
		var over tlsAnswer
		tries := 0
		testutil.Eventually(t, 30*time.Second, name+": a 503 beside the holder", func() bool {
			select {
			case <-held:
				hw.Close()
				hw, held = hold()
			default:
			}
			tries++
			over = tlsPost(c, p.Addr, "/pay", fmt.Sprint("over-", name, tries), strings.NewReader(strings.Repeat("o", 600<<10)))
			return over.status == 503
		})
		refused = append(refused, "big-"+name, "slow-"+name, fmt.Sprint("over-", name, tries))
		hw.CloseWithError(io.ErrUnexpectedEOF)
		<-held
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "POST", "https://"+p.Addr+"/pay", strings.NewReader("x"))
		req.Header.Set("X-Huge", strings.Repeat("h", 2<<20))
		resp, err := c.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != 431 {
				t.Errorf("%s: a 2 MiB header: %d, want 431 or refused", name, resp.StatusCode)
			}
		}
	}
	for _, key := range refused {
		if up.Count(key) != 0 {
			t.Errorf("the refused request %s reached the upstream", key)
		}
	}
}

// Over HTTP/2, a client that starts a header block and stalls is cut off: the
// connection has no stream yet, so idle_timeout closes it.
func TestE2ETLSHTTP2StalledHeadersCutOff(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeCert(t, cert, key, "stall")
	p := start(t, "--upstream", up.URL, "--tls-cert", cert, "--tls-key", key, "--idle-timeout", "2s", "--read-header-timeout", "1s")
	conn, err := tls.Dial("tcp", p.Addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if conn.ConnectionState().NegotiatedProtocol != "h2" {
		t.Fatalf("ALPN: %q", conn.ConnectionState().NegotiatedProtocol)
	}
	fr := http2.NewFramer(conn, conn)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "api.example"}, {":path", "/pay"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	// The first half of the block, without END_HEADERS; the rest never comes.
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes()[:block.Len()/2], EndHeaders: false}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		if _, err := fr.ReadFrame(); err != nil {
			break
		}
	}
	d := time.Since(began)
	t.Logf("stalled HTTP/2 header block closed after %v", d)
	if d > 8*time.Second {
		t.Fatalf("a stalled HTTP/2 header block held its connection %v", d)
	}
	if up.Total() != 0 {
		t.Fatal("the stalled request reached the upstream")
	}
}
