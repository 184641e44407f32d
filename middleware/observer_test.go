package middleware_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/middleware"
)

func TestObserverEvent(t *testing.T) {
	var evs events
	h := newHandler(t, newMem(t), func(s *middleware.Settings) { s.Observer = evs.Observe }).Wrap(&counter{})
	serve(h, req{Key: "obs"})
	serve(h, req{Key: "obs"})
	if len(evs.All()) != 2 {
		t.Fatalf("events: %d", len(evs.All()))
	}
	first, second := evs.All()[0], evs.All()[1]
	if first.Outcome != middleware.OutcomeStored || first.Status != 201 || len(first.KeyHash) != 12 || first.KeyHash != second.KeyHash {
		t.Fatalf("first event %+v", first)
	}
	if strings.Contains(first.KeyHash, "obs") || first.Request == nil || first.Duration <= 0 {
		t.Fatalf("first event %+v", first)
	}
	if second.Outcome != middleware.OutcomeReplayed || second.Status != 201 {
		t.Fatalf("second event %+v", second)
	}
}

// The observer learns a replay's or a problem's outcome before the response is
// written (Caddy's result placeholder is read when headers are written).
func TestObserverRunsBeforeTheAnswerIsWritten(t *testing.T) {
	var w *httptest.ResponseRecorder
	var writtenBefore []bool
	h := newHandler(t, newMem(t), func(s *middleware.Settings) {
		s.Observer = func(ev middleware.Event) {
			writtenBefore = append(writtenBefore, w.Code != 200 || w.Body.Len() > 0 || len(w.Header()) > 0)
		}
	}).Wrap(&counter{})
	for _, q := range []req{{Key: "o"}, {Key: "o"}, {Key: "o", Body: "other"}, {Key: "a,b"}} {
		w = httptest.NewRecorder()
		h.ServeHTTP(w, q.Build())
	}
	// The first (an execution) is observed after the fact; the replay, the
	// mismatch and the invalid key before anything is written.
	if len(writtenBefore) != 4 || !writtenBefore[0] || writtenBefore[1] || writtenBefore[2] || writtenBefore[3] {
		t.Fatalf("written before the observer ran: %v", writtenBefore)
	}
}
