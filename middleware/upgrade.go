package middleware

import (
	"errors"
	"net/http"
	"strings"
)

// errSwitched: a first execution switched protocols or took the connection over.
var errSwitched = errors.New("the first execution switched protocols (101) or took the connection over: no answer to store, and it may have acted")

// asksUpgrade reports whether a request asks to switch protocols: it carries an
// Upgrade header, or a Connection header naming upgrade (RFC 9110 §7.8).
func asksUpgrade(h http.Header) bool {
	if len(h["Upgrade"]) > 0 {
		return true
	}
	for _, v := range h["Connection"] {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return true
			}
		}
	}
	return false
}

// refuseUpgrade answers 400 upgrade-refused to a request with a key that asks to
// switch protocols, and reports whether it did. A switched connection leaves no
// answer to store and replay, while the upstream may have acted on the request:
// every retry would run it again. So it is refused before anything is claimed or
// forwarded.
func (h *Handler) refuseUpgrade(w http.ResponseWriter, r *http.Request, t *tracker) bool {
	if !asksUpgrade(r.Header) {
		return false
	}
	t.problem(w, OutcomeInvalid, nil, newProblem(ProblemUpgradeRefused, http.StatusBadRequest,
		"a request with an idempotency key must not ask to switch protocols (Upgrade): a switched connection leaves no answer to replay; nothing was executed"), 0)
	return true
}
