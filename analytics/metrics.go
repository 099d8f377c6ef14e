package analytics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quota-platform/quota/analytics/userdays"
)

type collectors struct {
	rowsWritten  *prometheus.CounterVec // table
	statements   *prometheus.CounterVec // table
	flushSeconds prometheus.Histogram
	dropped      prometheus.Counter
	droppedAdds  prometheus.Counter
	flushErrors  prometheus.Counter
	pendingRows  prometheus.Gauge
	pendingAdds  *prometheus.GaugeVec // scope
	lastFlush    prometheus.Gauge
}

func newCollectors(reg prometheus.Registerer) *collectors {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	byTable := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"table"})
	}
	c := &collectors{
		rowsWritten: byTable("quota_analytics_rows_written_total", "Analytics rows committed to MySQL, by table."),
		statements:  byTable("quota_analytics_statements_total", "Analytics write statements sent to MySQL (multi-row upserts), by table."),
		flushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "quota_analytics_flush_seconds",
			Help:    "Duration of one analytics flush (Redis PFADDs and every shard's transaction).",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		dropped: counter("quota_analytics_dropped_total",
			"Calls not counted in analytics because the pending rows reached QUOTA_ANALYTICS_BUFFER_MAX."),
		droppedAdds: counter("quota_analytics_unique_adds_dropped_total",
			"Distinct-user adds not sent to Redis because QUOTA_ANALYTICS_BUFFER_MAX of them were already waiting (Redis unreachable?)."),
		flushErrors: counter("quota_analytics_flush_errors_total",
			"Analytics flushes that left rows pending (MySQL or Redis failed); they are retried."),
		pendingRows: gauge("quota_analytics_pending_rows", "Analytics rows waiting to be written after the last flush."),
		pendingAdds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "quota_analytics_pending_user_adds",
			Help: "Distinct-user adds held in memory after the last flush, by HyperLogLog scope: app (Redis failed) or interface (waiting for the interface pass, QUOTA_ANALYTICS_IFACE_USERS_EVERY, or Redis failed).",
		}, []string{"scope"}),
		lastFlush: gauge("quota_analytics_last_flush_success_timestamp_seconds",
			"Unix time of the last analytics flush that failed nowhere (the recorder's start until the first); time() minus it is the flush lag."),
	}
	// Every table's series and both scopes exist from the start (at 0),
	// so that the dashboard shows zeros before the first flush.
	for _, t := range []string{seriesTable.Name, dailyTable.Name, userdays.ChunksTable, userdays.SealedTable, "usage_uniques"} {
		c.rowsWritten.WithLabelValues(t)
		c.statements.WithLabelValues(t)
	}
	c.pendingAdds.WithLabelValues("app")
	c.pendingAdds.WithLabelValues("interface")
	if reg != nil {
		reg.MustRegister(c.rowsWritten, c.statements, c.flushSeconds, c.dropped, c.droppedAdds, c.flushErrors, c.pendingRows, c.pendingAdds, c.lastFlush)
	}
	return c
}
