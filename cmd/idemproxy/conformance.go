package main

// `idemproxy conformance`: the black-box suite of package conformance run
// against any server that claims to enforce Idempotency-Key.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os/signal"
	"strings"
	"syscall"

	"github.com/idemproxy/idemproxy/conformance"
)

// headerFlag is a repeatable 'Name: value' flag.
type headerFlag struct{ h http.Header }

func (f *headerFlag) String() string { return "" }
func (f *headerFlag) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " \t") {
		return fmt.Errorf("%q: want 'Name: value'", v)
	}
	if f.h == nil {
		f.h = http.Header{}
	}
	f.h.Add(name, strings.TrimSpace(value))
	return nil
}

// conformanceMain runs `idemproxy conformance`. Exit 0: every required
// check passed; 1: one did not; 2: bad usage, or a target the suite cannot
// test (its route does not create something on POST).
func conformanceMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg conformance.Config
	var header, other headerFlag
	fs.StringVar(&cfg.Target, "target", "", "")
	fs.StringVar(&cfg.Path, "path", "", "")
	fs.StringVar(&cfg.SlowPath, "slow-path", "", "")
	fs.StringVar(&cfg.TimeoutPath, "timeout-path", "", "")
	fs.Var(&header, "header", "")
	fs.Var(&other, "other-header", "")
	fs.StringVar(&cfg.Body, "body", conformance.DefaultBody, "")
	fs.StringVar(&cfg.OtherBody, "other-body", conformance.DefaultOtherBody, "")
	fs.StringVar(&cfg.ContentType, "content-type", conformance.DefaultContentType, "")
	fs.StringVar(&cfg.KeyHeader, "key-header", conformance.DefaultKeyHeader, "")
	fs.BoolVar(&cfg.BareKeys, "bare-keys", false, "")
	fs.BoolVar(&cfg.KeyOptional, "key-optional", false, "")
	fs.IntVar(&cfg.MaxKeyLength, "max-key-length", conformance.DefaultMaxKeyLength, "")
	fs.IntVar(&cfg.Concurrency, "concurrency", conformance.DefaultConcurrency, "")
	fs.DurationVar(&cfg.Expiry, "expiry", 0, "")
	fs.DurationVar(&cfg.Timeout, "timeout", conformance.DefaultTimeout, "")
	level := fs.String("level", string(conformance.Strict), "")
	asJSON := fs.Bool("json", false, "")
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, conformanceUsage)
		return 0
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err == nil && cfg.Target == "" {
		err = errors.New("--target is required")
	}
	if err != nil {
		fmt.Fprintf(stderr, "idemproxy conformance: %v\n\n%s", err, conformanceUsage)
		return 2
	}
	cfg.Level = conformance.Level(*level)
	cfg.Header, cfg.OtherHeader = header.h, other.h

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := conformance.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "idemproxy conformance:", err)
		return 2
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "idemproxy conformance:", err)
		return 1
	}
	if !rep.OK {
		return 1
	}
	return 0
}

const conformanceUsage = `usage: idemproxy conformance --target URL [--path /v1/charges] [--header 'Authorization: …']
                             [--slow-path PATH] [--timeout-path PATH] [--expiry D] [--level draft|strict] [--json]

Sends real requests to a server that claims to enforce Idempotency-Key (a proxy
in front of an API, or the API itself) and reports, per check, PASS, FAIL or SKIP
with what it saw, then "N passed, M failed". Each check, its section of
draft-ietf-httpapi-idempotency-key-header and what it needs: docs/conformance.md.
Exit 0: every required check passed; 1: one did not (failed, or skipped for want
of a flag below); 2: bad usage, or a target it cannot test.

What the target needs: a route that creates something on POST and answers 2xx
with a body that differs each time it runs (a new id): a replay is told from a
second execution by the body. It checks that first (two POSTs, two fresh keys).
Every key is random, in a UUID's shape, and new: runs never collide. Records it
leaves behind are the target's own to expire.

  --target URL            the server: http://host:port (required)
  --path PATH             the route that creates, with its query (default: the target URL's path)
  --header 'Name: value'  sent with every request: credentials, a Host (repeatable)
  --other-header 'N: v'   a second credential for credential-scope, in place of --header's
                          of the same name (default: two made-up bearer tokens, when
                          --header has no Authorization; else the check is skipped)
  --slow-path PATH        a route whose POST takes a second or more (e.g. the demo API's
                          /charges?delay=1s), for in-flight and concurrent; default --path,
                          and in-flight is skipped if that answers too fast to catch
  --timeout-path PATH     a route whose POST outlives the target's own deadline (a proxy's
                          upstream timeout), for unknown-outcome (advisory); default: skipped
  --expiry D              the target's published key expiry, for expiry (advisory): the
                          check waits a little past D (beside the others); default: skipped
  --level L               strict (default): every check but the two advisory ones is
                          required; draft: only what the draft's text names an answer for
                          (replay, in-flight, concurrent, mismatch, missing-key)
  --key-optional          the route runs requests without a key: missing-key does not apply
  --bare-keys             send keys bare (Stripe's way) instead of as sf-strings ("…", §2.1)
  --key-header NAME       the key's header (default Idempotency-Key)
  --max-key-length N      the longest key the target takes; invalid-key sends N+1 (default 255)
  --body TEXT             the request body (default {"amount":1000,"currency":"usd"})
  --other-body TEXT       another body the route accepts, for mismatch (default amount 2000)
  --content-type TYPE     the bodies' Content-Type (default application/json)
  --concurrency N         duplicates sent at once by concurrent (default 10)
  --timeout D             bound on each request (default 30s)
  --json                  the report as JSON instead of text
`
