package migrate

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quota-platform/quota/tiers"
)

// Metrics are the migration's collectors. A nil *Metrics records nothing.
type Metrics struct {
	moves       *prometheus.CounterVec
	quietMoves  prometheus.Counter
	idleMoves   prometheus.Counter
	failures    prometheus.Counter
	cycles      *prometheus.CounterVec // result: ok | error
	lastSuccess prometheus.Gauge
	tierCells   *prometheus.GaugeVec // tier
	tierBytes   *prometheus.GaugeVec // tier
	tierCounted prometheus.Gauge
}

// NewMetrics creates the collectors and registers them on reg (when not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_migrations_total",
			Help: "Cells moved between tiers, by direction.",
		}, []string{"from", "to"}),
		quietMoves: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quota_migrations_quiet_total",
			Help: "Of the cells moved hot to cold, those moved by the quiet move (a count copied, then an atomic switch; no journal, no freeze); the others took the full protocol.",
		}),
		idleMoves: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quota_migrations_idle_total",
			Help: "Of the cells moved by the quiet move, the idle ones (no counter: no lease either).",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quota_migration_failures_total",
			Help: "Move batches that failed (the next run repairs them).",
		}),
		cycles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_migration_cycles_total",
			Help: "Migration cycles this instance took part in, by result: ok, or error (some of its work failed).",
		}, []string{"result"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "quota_migration_last_success_timestamp_seconds",
			Help: "Unix time at which this instance last finished a migration cycle without error (0: none since start).",
		}),
		tierCells: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "quota_tier_cells",
			Help: "Cells in each tier as of the last count (GET /v1/admin/tiers, quotactl tiers: a scan of every key, so not on each scrape).",
		}, []string{"tier"}),
		tierBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "quota_tier_bytes",
			Help: "Estimated bytes of each tier as of the last count (see quota_tier_cells).",
		}, []string{"tier"}),
		tierCounted: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "quota_tier_counted_timestamp_seconds",
			Help: "Unix time of the last count of the tiers (0: none since start).",
		}),
	}
	// Every series exists from the start, so that rate() and increase()
	// see the first cycle, error or move.
	m.cycles.WithLabelValues("ok")
	m.cycles.WithLabelValues("error")
	for _, d := range [][2]tiers.Tier{{tiers.Hot, tiers.Warm}, {tiers.Hot, tiers.Cold}, {tiers.Warm, tiers.Hot}, {tiers.Warm, tiers.Cold}, {tiers.Cold, tiers.Hot}, {tiers.Cold, tiers.Warm}} {
		m.moves.WithLabelValues(string(d[0]), string(d[1]))
	}
	for _, t := range []tiers.Tier{tiers.Hot, tiers.Warm, tiers.Cold} {
		m.tierCells.WithLabelValues(string(t))
		m.tierBytes.WithLabelValues(string(t))
	}
	if reg != nil {
		reg.MustRegister(m.moves, m.quietMoves, m.idleMoves, m.failures, m.cycles, m.lastSuccess, m.tierCells, m.tierBytes, m.tierCounted)
	}
	return m
}

func (m *Metrics) moved(from, to tiers.Tier, n int) {
	if m != nil && n > 0 {
		m.moves.WithLabelValues(string(from), string(to)).Add(float64(n))
	}
}

func (m *Metrics) movedQuiet(n, idle int) {
	if m != nil && n > 0 {
		m.quietMoves.Add(float64(n))
		m.idleMoves.Add(float64(idle))
	}
}

func (m *Metrics) failed() {
	if m != nil {
		m.failures.Inc()
	}
}

// CycleDone records the end of a cycle at now.
func (m *Metrics) CycleDone(err error, now time.Time) {
	if m == nil {
		return
	}
	if err != nil {
		m.cycles.WithLabelValues("error").Inc()
		return
	}
	m.cycles.WithLabelValues("ok").Inc()
	m.lastSuccess.Set(float64(now.Unix()))
}

// counted records a count of the tiers made at now.
func (m *Metrics) counted(st TierStats, now time.Time) {
	if m == nil {
		return
	}
	for t, u := range map[tiers.Tier]TierUsage{tiers.Hot: st.Hot, tiers.Warm: st.Warm, tiers.Cold: st.Cold} {
		m.tierCells.WithLabelValues(string(t)).Set(float64(u.Identities))
		m.tierBytes.WithLabelValues(string(t)).Set(float64(u.Bytes))
	}
	m.tierCounted.Set(float64(now.Unix()))
}
