// Package coretest holds test helpers for the users of the protocol core
// (package middleware): what the core reports to its observer. It is apart from
// package testutil, which imports nothing of the project.
package coretest

import (
	"sync"

	"github.com/idemproxy/idemproxy/middleware"
)

// Events collects the observer's events: set Settings.Observer to Observe.
type Events struct {
	mu  sync.Mutex
	all []middleware.Event
}

// Observe records ev; it is a middleware observer.
func (e *Events) Observe(ev middleware.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

// All returns the events so far, in order.
func (e *Events) All() []middleware.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]middleware.Event(nil), e.all...)
}

// Outcomes returns the events' outcomes so far, in order.
func (e *Events) Outcomes() []middleware.Outcome {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]middleware.Outcome, len(e.all))
	for i, ev := range e.all {
		out[i] = ev.Outcome
	}
	return out
}
