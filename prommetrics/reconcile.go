package prommetrics

import (
	"github.com/idemproxy/idemproxy/reconcile"
	"github.com/prometheus/client_golang/prometheus"
)

// Reconcile metric names (proxy only: reconcile asks the proxy's upstream).
const (
	ReconcileAttempts = "idemproxy_reconcile_attempts_total"
	ReconcileOutcomes = "idemproxy_reconcile_outcomes_total"
)

// ReconcileAnswers and ReconcileOutcomeLabels are the label values, declared
// at zero.
var (
	ReconcileAnswers       = []string{reconcile.AnswerDone, reconcile.AnswerNotFound, reconcile.AnswerOther, reconcile.AnswerError}
	ReconcileOutcomeLabels = []string{reconcile.OutcomeResolved, reconcile.OutcomeReleased, reconcile.OutcomeRetry,
		reconcile.OutcomeExhausted, reconcile.OutcomeGone}
)

// Reconcile counts reconcile requests sent upstream by their answer, and
// what became of each job worked on. It is a prometheus.Collector.
type Reconcile struct {
	group
	attempts, outcomes *prometheus.CounterVec
}

// NewReconcile returns the counters at zero.
func NewReconcile() *Reconcile {
	r := &Reconcile{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ReconcileAttempts,
			Help: "Reconcile requests sent upstream for held unknown outcomes, by answer: done, not_found, other (another status) or error (none).",
		}, []string{"answer"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ReconcileOutcomes,
			Help: "Reconcile jobs worked on, by outcome: resolved (the done answer is stored), released (the retry runs), retry (tried again later), exhausted (held for an operator) or gone (settled otherwise meanwhile).",
		}, []string{"outcome"}),
	}
	for _, a := range ReconcileAnswers {
		r.attempts.WithLabelValues(a)
	}
	for _, o := range ReconcileOutcomeLabels {
		r.outcomes.WithLabelValues(o)
	}
	r.group = group{r.attempts, r.outcomes}
	return r
}

// Observe counts one job worked on (reconcile.Worker.Observe).
func (r *Reconcile) Observe(a reconcile.Attempt) {
	if a.Answer != "" {
		r.attempts.WithLabelValues(a.Answer).Inc()
	}
	r.outcomes.WithLabelValues(a.Outcome).Inc()
}
