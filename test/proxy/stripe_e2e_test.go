package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/stripe/stripe-go/v85"
)

// stripe-go, Stripe's own Go SDK, against the built proxy over real sockets. In
// the stripe error format, a key reused with other parameters is answered 422
// once and comes back as a typed *stripe.Error (idempotency_error); in the
// problem format stripe-go cannot parse the body, so it sends the 422 request
// again until its retries run out and returns an untyped error.
func TestE2EStripeSDK(t *testing.T) {
	skipShort(t)
	var created atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"cus_%d","object":"customer","email":%q}`, created.Add(1), r.FormValue("email"))
	}))
	defer api.Close()

	for _, tc := range []struct {
		format     string
		wantSent   int // 422s the proxy answered for the one call
		wantTyped  bool
		wantShould string
	}{
		{format: "stripe", wantSent: 1, wantTyped: true, wantShould: "false"},
		{format: "problem", wantSent: 4, wantTyped: false}, // 1 + MaxNetworkRetries
	} {
		t.Run(tc.format, func(t *testing.T) {
			p := start(t, "--upstream", api.URL, "--error-format", tc.format)
			var last atomic.Value
			httpClient := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := http.DefaultTransport.RoundTrip(r)
				if err == nil {
					last.Store(resp.Header.Clone())
				}
				return resp, err
			})}
			sc := stripe.NewClient("sk_test_123", stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
				URL: stripe.String("http://" + p.Addr), HTTPClient: httpClient, MaxNetworkRetries: stripe.Int64(3),
				LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
			})))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			key := "order-" + tc.format
			params := &stripe.CustomerCreateParams{Email: stripe.String("a@example.com")}
			params.SetIdempotencyKey(key)
			first, err := sc.V1Customers.Create(ctx, params)
			if err != nil {
				t.Fatalf("first create: %v", err)
			}
			again := &stripe.CustomerCreateParams{Email: stripe.String("a@example.com")}
			again.SetIdempotencyKey(key)
			if c, err := sc.V1Customers.Create(ctx, again); err != nil || c.ID != first.ID {
				t.Fatalf("replayed create: %+v %v, want %s", c, err, first.ID)
			}

			other := &stripe.CustomerCreateParams{Email: stripe.String("b@example.com")}
			other.SetIdempotencyKey(key)
			_, err = sc.V1Customers.Create(ctx, other)
			var se *stripe.Error
			typed := errors.As(err, &se)
			if typed != tc.wantTyped {
				t.Fatalf("error %T %v: typed *stripe.Error = %v, want %v", err, err, typed, tc.wantTyped)
			}
			if typed {
				if se.Type != stripe.ErrorTypeIdempotency || se.HTTPStatusCode != 422 || se.Code != "mismatch" {
					t.Fatalf("stripe.Error: type %q code %q status %d", se.Type, se.Code, se.HTTPStatusCode)
				}
				var ie *stripe.IdempotencyError
				if !errors.As(err, &ie) {
					t.Fatalf("not an *stripe.IdempotencyError: %#v", se.Err)
				}
				h := last.Load().(http.Header)
				if h.Get("Stripe-Should-Retry") != tc.wantShould || h.Get("Idempotency-Key") != key || h.Get("Cache-Control") != "no-store" {
					t.Fatalf("422 headers: %v", h)
				}
			}
			if n := mismatches(t, p.Admin); n != tc.wantSent {
				t.Fatalf("the proxy answered %d 422s for one call, want %d", n, tc.wantSent)
			}
			if created.Load() != 1 && tc.format == "stripe" {
				t.Fatalf("upstream created %d customers, want 1", created.Load())
			}
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// mismatches reads idemproxy_requests_total{outcome="mismatch"} from the
// admin listener, summed over the routes.
func mismatches(t *testing.T, admin string) int {
	t.Helper()
	b := metricsOf(t, admin)
	ms := regexp.MustCompile(`idemproxy_requests_total\{outcome="mismatch",route="[^"]*"\} (\d+)`).FindAllStringSubmatch(b, -1)
	if ms == nil {
		t.Fatalf("no mismatch counter in:\n%s", b)
	}
	total := 0
	for _, m := range ms {
		n, _ := strconv.Atoi(m[1])
		total += n
	}
	return total
}

// The proxy's own answers follow the route's error format too: the upstream
// unreachable (502, retry: nothing ran) and a non-canonical path (400).
func TestE2EProxyProblemsInErrorFormat(t *testing.T) {
	skipShort(t)
	p := start(t, "--upstream", "http://"+testutil.FreeAddr(t), "--error-format", "stripe")
	r := p.Post(t, "/pay", "k-down", "x")
	if r.Status != 502 || !strings.Contains(r.Body, `"code":"upstream_unavailable"`) || !strings.Contains(r.Body, `"type":"api_error"`) ||
		r.Header.Get("Stripe-Should-Retry") != "true" || r.Header.Get("Idempotency-Key") != "k-down" ||
		r.Header.Get("Idempotency-Problem") != "urn:idemproxy:problem:upstream-unavailable" {
		t.Fatalf("upstream down: %+v", r)
	}
	r = p.Post(t, "/a/../pay", "k-path", "x")
	if r.Status != 400 || !strings.Contains(r.Body, `"code":"non_canonical_path"`) || r.Header.Get("Stripe-Should-Retry") != "false" {
		t.Fatalf("non-canonical path: %+v", r)
	}
}
