package conformance

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"
)

// maxBody is how much of an answer's body the suite reads.
const maxBody = 1 << 20

// post is one request a check sends.
type post struct {
	path     string
	key      string // the key, unquoted; "" sends none
	rawKey   string // the header's value as is, when set (invalid keys)
	body     string // "": the configured body
	override http.Header
}

// response is what came back: an answer, or the error that came instead.
type response struct {
	status int
	header http.Header
	body   string
	err    error
	sent   time.Time
	done   time.Time
	took   time.Duration
}

func (r *response) ok() bool { return r.err == nil && r.status >= 200 && r.status < 300 }

// short is the answer in a few words: "201 {"id":"ch_1"…}", or the error.
func (r *response) short() string {
	if r.err != nil {
		return "no answer (" + r.err.Error() + ")"
	}
	return fmt.Sprintf("%d %s", r.status, clip(r.body, 60))
}

// sameAs reports whether r is a replay of first: the same status and body.
func (r *response) sameAs(first *response) bool {
	return r.err == nil && first.err == nil && r.status == first.status && r.body == first.body
}

// post sends p and reads its answer.
func (s *suite) post(ctx context.Context, p post) *response {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	body := p.body
	if body == "" {
		body = s.cfg.Body
	}
	r := &response{sent: time.Now()}
	defer func() { r.done = time.Now(); r.took = r.done.Sub(r.sent) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url(p.path), strings.NewReader(body))
	if err != nil {
		r.err = err
		return r
	}
	for name, values := range s.cfg.Header {
		req.Header[http.CanonicalHeaderKey(name)] = values
	}
	for name, values := range p.override {
		req.Header[http.CanonicalHeaderKey(name)] = values
	}
	if host := req.Header.Get("Host"); host != "" {
		req.Host = host
		req.Header.Del("Host")
	}
	req.Header.Set("Content-Type", s.cfg.ContentType)
	switch {
	case p.rawKey != "":
		req.Header[http.CanonicalHeaderKey(s.cfg.KeyHeader)] = []string{p.rawKey}
	case p.key != "":
		req.Header.Set(s.cfg.KeyHeader, s.keyValue(p.key))
	}
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		r.err = err
		return r
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	r.status, r.header, r.body = resp.StatusCode, resp.Header, string(b)
	if err != nil {
		r.err = fmt.Errorf("reading the body after %d: %w", resp.StatusCode, err)
	}
	return r
}

// mediaType is a Content-Type's media type, in lower case.
func mediaType(v string) string {
	t, _, err := mime.ParseMediaType(v)
	if err != nil {
		return strings.ToLower(strings.TrimSpace(v))
	}
	return t
}

// clip shortens text to n bytes for a report line.
func clip(text string, n int) string {
	text = strings.Join(strings.Fields(text), " ")
	if len(text) <= n {
		return text
	}
	return text[:n] + "…"
}
