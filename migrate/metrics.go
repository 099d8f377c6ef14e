package migrate

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quota-platform/quota/tiers"
)

// Metrics are the migration's collectors. A nil *Metrics records nothing.
type Metrics struct {
	moves    *prometheus.CounterVec
	failures prometheus.Counter
}

// NewMetrics creates the collectors and registers them on reg (when not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_migrations_total",
			Help: "Cells moved between tiers, by direction.",
		}, []string{"from", "to"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quota_migration_failures_total",
			Help: "Move batches that failed (the next run repairs them).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.moves, m.failures)
	}
	return m
}

func (m *Metrics) moved(from, to tiers.Tier, n int) {
	if m != nil && n > 0 {
		m.moves.WithLabelValues(string(from), string(to)).Add(float64(n))
	}
}

func (m *Metrics) failed() {
	if m != nil {
		m.failures.Inc()
	}
}
