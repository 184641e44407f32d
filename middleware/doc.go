// Package middleware is idemproxy's protocol core: it makes POST and PATCH
// requests that carry an Idempotency-Key run once, and answers their repeats with
// the stored response. It knows nothing of Caddy, of proxying or of
// configuration text; the reverse proxy, the Caddy module and package config are
// adapters around it.
//
// What lives where:
//
//   - settings.go: Settings, every setting as a Go value with its json name
//     (every surface's name for it), DefaultSettings (the one table of
//     defaults), Option, and what New derives from them once.
//   - plugins.go: what plugs in. KeySource (default HeaderKey), Verifier,
//     ErrorFormat (default ProblemJSON), BodyFingerprint (default: the
//     body's bytes). Packages keysource, webhook, errformat and fingerprint
//     implement the others; this package imports none of them.
//   - handler.go: Handler, New, Handle — the flow of one request: the canonical
//     request, its key, its claim, and the duplicate's answer.
//   - canonical.go: the one reading of a request that route matching, tracking,
//     the scope and the fingerprint share (method, path, Host).
//   - body.go, budget.go: the bounded, timed body read, and the process-wide
//     body budget.
//   - claim.go: a claim, which owns one first execution: run it and classify
//     how it ended; complete.go: store its response or release its key, and
//     retry the store in the background; unknown.go: hold an unknown outcome;
//     renew.go: renew its lease while it runs.
//   - recorder.go: the response recorder; keyecho.go: the key never stored,
//     echoed at replay; upgrade.go: switching protocols refused.
//   - digest.go, owner.go, cookie.go: the store key (scope, namespace, key
//     source), the owner a bounded store shares by; fingerprint.go: the
//     fingerprint, the part digests kept with it, and the parts a 422 names.
//   - wait.go: a duplicate waiting for the first; passthrough.go: keyless
//     requests; outcome.go: ErrNotSent, ErrOutcomeUnknown and the operator's
//     Resolve; problem.go, event.go, status.go: problems, observer events,
//     status sets.
//
// The names: "key" is the client's idempotency key; "storeKey" the digest the
// store knows a record by. They never share a name.
package middleware
