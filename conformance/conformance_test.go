package conformance

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// config is a run against srv with the slow and timeout routes the test
// target honours (delay= below and above its deadline).
func config(srv *httptest.Server) Config {
	return Config{
		Target:      srv.URL,
		Path:        "/charges",
		SlowPath:    "/charges?delay=300ms",
		TimeoutPath: "/charges?delay=5s",
	}
}

func newTarget(b breaks) *target {
	return &target{breaks: b, deadline: 600 * time.Millisecond, ttl: 800 * time.Millisecond}
}

func runOn(t *testing.T, tg *target, cfg func(*Config)) Report {
	t.Helper()
	srv := httptest.NewServer(tg)
	t.Cleanup(srv.Close)
	c := config(srv)
	if cfg != nil {
		cfg(&c)
	}
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func text(rep Report) string {
	var b strings.Builder
	rep.WriteText(&b)
	return b.String()
}

// A target that does everything right passes every check, expiry included,
// and waiting instead of 409 passes in-flight as well.
func TestCorrectTargetPasses(t *testing.T) {
	for _, wait := range []bool{false, true} {
		t.Run(fmt.Sprintf("wait=%v", wait), func(t *testing.T) {
			t.Parallel()
			tg := newTarget(breaks{})
			tg.wait = wait
			rep := runOn(t, tg, func(c *Config) { c.Expiry = tg.ttl })
			out := text(rep)
			if !rep.OK || rep.Failed != 0 || rep.Skipped != 0 || rep.Passed != len(checks) {
				t.Fatalf("want every check passed:\n%s", out)
			}
			if want := fmt.Sprintf("%d passed, 0 failed: every required check passed\n", len(checks)); !strings.HasSuffix(out, want) {
				t.Fatalf("summary line: want %q:\n%s", want, out)
			}
			inFlight := rep.Results[slices.Index(IDs(), "in-flight")].Saw
			if got := strings.Contains(inFlight, "waited"); got != wait {
				t.Errorf("in-flight saw %q (wait %v)", inFlight, wait)
			}
		})
	}
}

// Each check is seen failing against a target that breaks what it checks,
// and only that check fails (noStore, a pass-through, breaks most).
func TestEachCheckSeenFailing(t *testing.T) {
	cases := []struct {
		name    string
		breaks  breaks
		config  func(*Config)
		failing []string
	}{
		{"replay loses a header", breaks{dropHeader: true}, nil, []string{"replay"}},
		{"claim lapses while running", breaks{shortLease: true}, nil, []string{"in-flight"}},
		{"look-up then claim", breaks{racyClaim: true}, nil, []string{"concurrent"}},
		{"body not fingerprinted", breaks{ignoreBody: true}, nil, []string{"mismatch"}},
		{"keyless requests run", breaks{keyOptional: true}, nil, []string{"missing-key"}},
		{"any key taken", breaks{anyKey: true}, nil, []string{"invalid-key"}},
		{"text errors", breaks{textErrors: true}, nil, []string{"problem-json"}},
		{"keys shared by credentials", breaks{unscoped: true}, nil, []string{"credential-scope"}},
		{"timed out, run again", breaks{rerunUnknown: true}, nil, []string{"unknown-outcome"}},
		{"records kept past expiry", breaks{noExpiry: true}, func(c *Config) { c.Expiry = 800 * time.Millisecond }, []string{"expiry"}},
		{"expires early", breaks{}, func(c *Config) { c.Expiry = 4 * time.Second }, []string{"expiry"}},
		{"pass-through", breaks{noStore: true}, nil,
			[]string{"replay", "in-flight", "concurrent", "mismatch", "credential-scope", "unknown-outcome"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rep := runOn(t, newTarget(tc.breaks), tc.config)
			if got := rep.Failing(); !slices.Equal(got, tc.failing) {
				t.Fatalf("failing %v, want %v:\n%s", got, tc.failing, text(rep))
			}
			required := false
			for _, res := range rep.Results {
				if res.Status == Fail && res.Required {
					required = true
				}
			}
			if rep.OK == required {
				t.Errorf("OK %v with a required check failed %v:\n%s", rep.OK, required, text(rep))
			}
		})
	}
}

// The level decides what is required: an unvalidated key fails the run at
// strict and is advisory at draft; a route whose key is optional (said so)
// is not held to a 400.
func TestLevels(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		level Level
		ok    bool
	}{{Strict, false}, {Draft, true}} {
		rep := runOn(t, newTarget(breaks{anyKey: true}), func(c *Config) { c.Level = tc.level })
		if rep.OK != tc.ok || !slices.Equal(rep.Failing(), []string{"invalid-key"}) {
			t.Errorf("level %s: OK %v failing %v, want %v [invalid-key]:\n%s", tc.level, rep.OK, rep.Failing(), tc.ok, text(rep))
		}
	}
	rep := runOn(t, newTarget(breaks{keyOptional: true}), func(c *Config) { c.KeyOptional = true })
	res := rep.Results[slices.Index(IDs(), "missing-key")]
	if !rep.OK || res.Status != Skip || res.Required {
		t.Errorf("--key-optional: OK %v, missing-key %s required %v:\n%s", rep.OK, res.Status, res.Required, text(rep))
	}
}

// Without a slow route, a fast target's in-flight window cannot be seen: the
// check is skipped, says what to give, and the run is not OK (a required
// check did not pass). The optional ones say what they need.
func TestSkipsSayWhatTheyNeed(t *testing.T) {
	t.Parallel()
	rep := runOn(t, newTarget(breaks{}), func(c *Config) { c.SlowPath, c.TimeoutPath = "", "" })
	want := map[string]string{"in-flight": "--slow-path", "unknown-outcome": "--timeout-path", "expiry": "--expiry"}
	for _, res := range rep.Results {
		flag, ok := want[res.ID]
		if ok != (res.Status == Skip) || (ok && !strings.Contains(res.Saw, flag)) {
			t.Errorf("%s: %s %q; want skipped naming %s: %v", res.ID, res.Status, res.Saw, flag, ok)
		}
	}
	if rep.OK {
		t.Errorf("OK with in-flight skipped:\n%s", text(rep))
	}
	if out := text(rep); !strings.Contains(out, "required checks not passed: in-flight\n") {
		t.Errorf("summary does not name in-flight:\n%s", out)
	}
}

// Another credential the target refuses cannot show scoping: skipped, not
// failed; one given with --header alone and no other is skipped too.
func TestCredentialScopeNeedsTwoCredentials(t *testing.T) {
	t.Parallel()
	tg := newTarget(breaks{})
	guard := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer good" {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		tg.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(guard)
	defer srv.Close()
	c := config(srv)
	c.Header = http.Header{"Authorization": {"Bearer good"}}
	for name, other := range map[string]http.Header{"refused": {"Authorization": {"Bearer bad"}}, "none": nil} {
		c.OtherHeader = other
		rep, err := Run(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		res := rep.Results[slices.Index(IDs(), "credential-scope")]
		if res.Status != Skip || !strings.Contains(res.Saw, "--other-header") || rep.Failed != 0 {
			t.Errorf("%s: credential-scope %s %q, failed %d:\n%s", name, res.Status, res.Saw, rep.Failed, text(rep))
		}
	}
}

// A route the suite cannot read executions from is refused before any check,
// saying why: one that answers the same body each time, one that refuses.
func TestUnsuitableTargets(t *testing.T) {
	t.Parallel()
	for name, h := range map[string]http.HandlerFunc{
		"same body": func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201); fmt.Fprint(w, `{"ok":true}`) },
		"refused":   func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusUnauthorized) },
	} {
		srv := httptest.NewServer(h)
		_, err := Run(context.Background(), Config{Target: srv.URL, Path: "/x"})
		srv.Close()
		if !errors.Is(err, ErrUnsuitable) {
			t.Errorf("%s: %v, want ErrUnsuitable", name, err)
		}
	}
	if _, err := Run(context.Background(), Config{Target: "ftp://x"}); err == nil || errors.Is(err, ErrUnsuitable) {
		t.Errorf("an ftp target: %v", err)
	}
}

// Keys are UUID-shaped, end in the run's id, and never repeat.
func TestKeys(t *testing.T) {
	s, err := newSuite(Config{Target: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range 1000 {
		k := s.key()
		if len(k) != 36 || k[14] != '4' || !strings.HasSuffix(k, "-"+s.runID) || seen[k] {
			t.Fatalf("key %q (run %s)", k, s.runID)
		}
		seen[k] = true
	}
}
