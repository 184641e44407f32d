// Package frameworks is idemproxy's middleware in three Go routers, as recipes
// to copy (docs/go.md shows the same code): chi takes Handler.Wrap as it is;
// gin and echo have their own middleware signatures and response writers, so
// GinMiddleware and EchoMiddleware adapt the core's Handle to them. The
// examples run each through its router's chain: a replay, a 422, and a
// handler's own error answer, stored and replayed.
//
// It is a module of its own, so the root module's users never get chi, gin or
// echo in their dependencies.
package frameworks
