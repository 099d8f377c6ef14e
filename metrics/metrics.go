// Package metrics defines quotad's Prometheus metrics in one struct that is
// registered on a registry the caller owns (no global registry).
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the counters and histograms quotad exports.
type Metrics struct {
	Checks       *prometheus.CounterVec   // rule, decision: allowed | denied | shadow_denied
	Requests     *prometheus.CounterVec   // route, code
	CheckLatency *prometheus.HistogramVec // route
	StoreErrors  *prometheus.CounterVec   // tier
	Unenforced   prometheus.Counter       // checks answered without a decision (fail-open)
	RulesReloads *prometheus.CounterVec   // result: ok | error
	RulesVersion *prometheus.GaugeVec     // version
	InFlight     prometheus.Gauge         // HTTP requests being served
	Rejected     prometheus.Counter       // requests refused because too many were in flight
}

// New creates the metrics and registers them on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_checks_total", Help: "Limit decisions per rule entry, by decision.",
		}, []string{"rule", "decision"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_http_requests_total", Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"}),
		CheckLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "quota_check_duration_seconds",
			Help:    "Time to answer a check request, from body read to response written.",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .005, .01, .02, .05, .1, .25, 1},
		}, []string{"route"}),
		StoreErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_store_errors_total", Help: "Failed calls to a tier's store (Redis or MySQL).",
		}, []string{"tier"}),
		Unenforced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quota_unenforced_checks_total", Help: "Checks allowed without a decision because the store was down (QUOTA_FAIL_MODE=open).",
		}),
		RulesReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_rules_reloads_total", Help: "Rules reloads (SIGHUP or PUT /v1/rules) by result.",
		}, []string{"result"}),
		RulesVersion: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "quota_rules_info", Help: "1 for the version of the rules in force.",
		}, []string{"version"}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "quota_http_in_flight", Help: "HTTP requests being served.",
		}),
		Rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quota_http_rejected_total", Help: "Requests refused with 503 because QUOTA_MAX_IN_FLIGHT were already being served.",
		}),
	}
	// Series an alert takes rate() of exist from the start, so that the
	// first error is an increase from 0.
	m.StoreErrors.WithLabelValues("hot")
	m.RulesReloads.WithLabelValues("ok")
	m.RulesReloads.WithLabelValues("error")
	m.zeroRequests()
	reg.MustRegister(m.Checks, m.Requests, m.CheckLatency, m.StoreErrors, m.Unenforced,
		m.RulesReloads, m.RulesVersion, m.InFlight, m.Rejected)
	return m
}

// SetRulesVersion marks v as the version in force.
func (m *Metrics) SetRulesVersion(v string) {
	m.RulesVersion.Reset()
	m.RulesVersion.WithLabelValues(v).Set(1)
}
