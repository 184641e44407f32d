package middleware_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/errformat"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/internal/testutil/coretest"
	"github.com/idemproxy/idemproxy/keysource"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/webhook"
)

// The in-process helpers every package's tests share (internal/testutil): a
// counting handler, a request and serving it, the observer's events.
type (
	counter = testutil.Counter
	req     = testutil.Req
	events  = coretest.Events
)

var serve = testutil.Serve

// newMem is a memory store with opts (none: the defaults).
func newMem(t testing.TB, opts ...memstore.Options) *memstore.Store {
	t.Helper()
	var o memstore.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	s, err := memstore.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newHandler(t testing.TB, store cache.Store, opts ...middleware.Option) *middleware.Handler {
	t.Helper()
	h, err := middleware.New(store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// flaky wraps a store and fails chosen operations.
type flaky struct {
	cache.Store
	failClaim, failComplete, failRelease atomic.Bool
	extends                              chan struct{}
	completes                            atomic.Int64 // Complete calls
	// claimLostOnce makes the next Complete answer ErrClaimLost, as when another
	// claim held the key for a moment (a refused claim, since undone).
	claimLostOnce atomic.Bool
}

var errDown = errors.New("store down")

func (f *flaky) ClaimOrGet(ctx context.Context, key string, l cache.Claim) (*cache.Record, bool, error) {
	if f.failClaim.Load() {
		return nil, false, errDown
	}
	return f.Store.ClaimOrGet(ctx, key, l)
}

func (f *flaky) Complete(ctx context.Context, key, tok string, rec *cache.Record, ttl time.Duration) error {
	f.completes.Add(1)
	if f.failComplete.Load() {
		return errDown
	}
	if f.claimLostOnce.CompareAndSwap(true, false) {
		return cache.ErrClaimLost
	}
	return f.Store.Complete(ctx, key, tok, rec, ttl)
}

func (f *flaky) Release(ctx context.Context, key, tok string) error {
	if f.failRelease.Load() {
		return errDown
	}
	return f.Store.Release(ctx, key, tok)
}

func (f *flaky) Extend(ctx context.Context, key, tok string, lease time.Duration) error {
	err := errDown // a store that takes no Complete takes no other write either
	if !f.failComplete.Load() {
		err = f.Store.Extend(ctx, key, tok, lease)
	}
	if f.extends != nil {
		select {
		case f.extends <- struct{}{}:
		default:
		}
	}
	return err
}

// errorFormatOpt, keySourceOpt and webhookOpt build what plugs into the core
// from its configuration string, as package config does.
func errorFormatOpt(spec string) middleware.Option {
	f, err := errformat.Parse(spec)
	if err != nil {
		panic(err)
	}
	return func(s *middleware.Settings) { s.ErrorFormat = f }
}

func keySourceOpt(spec string) middleware.Option {
	if spec == "" {
		return func(*middleware.Settings) {} // the key header
	}
	ks, err := keysource.Parse(spec, "Idempotency-Key")
	if err != nil {
		panic(err)
	}
	return func(s *middleware.Settings) { s.KeySource = ks }
}

func webhookOpt(w webhook.Webhook) middleware.Option {
	v, err := webhook.New(w)
	if err != nil {
		panic(err)
	}
	return func(s *middleware.Settings) { s.Verifier, s.KeySource = v, v.KeySource() }
}
