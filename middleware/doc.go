// Package middleware makes retried HTTP requests safe. A POST or PATCH that
// carries an Idempotency-Key header runs once; its response is stored, and a
// retry with the same key gets that response back, with Idempotent-Replayed:
// true, instead of running again.
//
// Wrap a handler, a mux, or a whole router:
//
//	store, err := memstore.New(memstore.Options{}) // one process; redisstore, pgstore, dynamostore to share
//	if err != nil { … }
//	defer store.Close()
//	idem, err := middleware.New(store, func(s *middleware.Settings) {
//		s.RequireKey = true
//	})
//	if err != nil { … }
//	mux.HandleFunc("POST /orders", createOrder)
//	http.ListenAndServe(":8080", idem.Wrap(mux))
//
// What a client meets (each shown by a runnable example in example_test.go):
//
//   - the first request with a key runs; a response below 500 (but 408, 425,
//     429) is stored for 24 hours, and a 5xx releases the key so the retry runs;
//   - a retry of the same request replays the stored response;
//   - a retry while the first still runs: 409 with Retry-After, or, with
//     Settings.Wait, the replay once the first is done;
//   - the same key with another method, path, query or body: 422;
//   - no key where RequireKey asks for one, or an invalid key: 400;
//   - a store that does not answer: 503 (Settings.FailOpen passes through);
//     once three claims in a row could not reach it, at once, without a store
//     call, until a background ping reaches it (Handler.StoreDown).
//
// The core's own answers are RFC 9457 problems, with an Idempotency-Problem
// header naming their type. Keys belong to the credential that sent them (the
// Authorization header by default), so one client never reads another's
// response. Methods other than POST and PATCH pass through untouched.
//
// Where things are:
//
//   - Settings: every setting, with DefaultSettings for the defaults; New takes
//     Options, functions that change them. Each setting's row in
//     docs/settings.md gives its name in the proxy and in Caddy too, and
//     package config reads them from JSON or YAML.
//   - Stores: any cache.Store. Packages cache/memstore (in memory, the
//     default), cache/redisstore, cache/pgstore and cache/dynamostore.
//   - Key sources: KeySource, HeaderKey by default; package keysource reads a
//     JSON field, a form field or a digest of the body.
//   - Signed webhooks: Verifier; package webhook (Stripe, GitHub, Standard
//     Webhooks, HMAC) checks the signature and takes the key from it.
//   - Error formats: ErrorFormat, ProblemJSON by default; package errformat
//     has Stripe's shape and JSON templates.
//   - Fingerprints: BodyFingerprint; package fingerprint compares JSON, forms
//     and multipart bodies by meaning, not bytes.
//   - Observers: Settings.Observer gets one Event per tracked request;
//     package prommetrics turns them into the proxy's Prometheus metrics, and
//     package tracing links retries to the first request's trace.
//   - Routers: Wrap fits net/http and every router that takes a
//     func(http.Handler) http.Handler (chi's Use); Handle takes a Next that
//     returns an error. docs/go.md has recipes for chi, gin and echo, run as
//     examples in examples/frameworks.
//   - Shutting down: stop the server, then Handler.Wait, then close the store.
//
// The guide for Go users is docs/go.md in the repository; the rest of the
// documentation (the proxy, the Caddy module, stores, unknown outcomes) is
// beside it.
package middleware
