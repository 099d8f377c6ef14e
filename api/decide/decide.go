// Package decide is what quotad's check edges share between decoding a
// request and encoding its answer: POST /v1/check, /v1/check/batch and
// /v1/auth (package api, HTTP) and Envoy's ShouldRateLimit (package
// api/rlsgrpc, gRPC). It calls the limiter, counts the decision in the
// metrics, hands it to analytics, applies QUOTA_FAIL_MODE to a check the
// store could not decide, and gives the numbers the answers carry. It
// knows no transport: each edge decodes, authorizes and encodes its own.
package decide

import (
	"context"
	"crypto/subtle"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quota-platform/quota/analytics/throttled"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/metrics"
	"github.com/quota-platform/quota/rules"
)

// Deps is what the edges' decisions call.
type Deps struct {
	Settings config.Settings
	// Limiter decides batches (and single checks when Checks is nil); its
	// rules name the dimensions of denials recorded in Throttled.
	Limiter *limiter.Limiter
	// Checks decides single checks; nil means Limiter.Check. quotad passes
	// a coalesce.Coalescer so concurrent checks share one Redis pipeline.
	Checks  SingleChecker
	Metrics *metrics.Metrics
	Log     *slog.Logger
	// Usage receives every decided check for analytics; nil records nothing.
	Usage UsageRecorder
	// Throttled records the denying rules' identities of denied checks;
	// nil records none.
	Throttled *throttled.Throttled
}

// SingleChecker decides one check.
type SingleChecker interface {
	Check(ctx context.Context, req *limiter.Request) (limiter.Decision, error)
}

// UsageRecorder is fed every decided check (allowed or denied). It must not
// block: it runs on the check path.
type UsageRecorder interface {
	Record(appID, interfaceID, userID string, allowed bool)
}

// Core is the decision path of every check edge of one quotad: one set of
// metrics, analytics and fail-mode log lines whichever edge a check came by.
type Core struct {
	deps   Deps
	checks checkCounters
	// undecidedLog limits "check undecided" log lines to one a second.
	undecidedLog logThrottle
}

// New builds the decision path over d.
func New(d Deps) *Core {
	if d.Log == nil {
		d.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if d.Checks == nil {
		d.Checks = d.Limiter
	}
	c := &Core{deps: d}
	if d.Metrics != nil {
		c.checks.vec = d.Metrics.Checks
	}
	return c
}

// Settings are the settings the decisions were built with.
func (c *Core) Settings() config.Settings { return c.deps.Settings }

// Metrics are the metrics decisions are counted in (nil: none).
func (c *Core) Metrics() *metrics.Metrics { return c.deps.Metrics }

// Check decides one check (Deps.Checks).
func (c *Core) Check(ctx context.Context, req *limiter.Request) (limiter.Decision, error) {
	return c.deps.Checks.Check(ctx, req)
}

// CheckBatch decides checks in one store trip (Limiter.CheckBatch).
func (c *Core) CheckBatch(ctx context.Context, reqs []*limiter.Request) ([]limiter.Decision, error) {
	return c.deps.Limiter.CheckBatch(ctx, reqs)
}

// Decided counts the decision d of req in the metrics, analytics and who is
// throttled.
func (c *Core) Decided(req *limiter.Request, d *limiter.Decision) {
	c.Count(d)
	c.RecordUsage(req, d.Allowed)
	c.RecordDenied(req, d)
}

// Count counts d's entries in quota_checks_total by rule and decision.
func (c *Core) Count(d *limiter.Decision) {
	for i := range d.Entries {
		e := &d.Entries[i]
		decision := decAllowed
		switch {
		case !e.Allowed && e.Shadow:
			decision = decShadowDenied
		case !e.Allowed:
			decision = decDenied
		case !d.Allowed:
			decision = decNotCounted // this limit had room, another denied the call
		}
		c.checks.of(e.Rule)[decision].Inc()
	}
}

// The decisions of quota_checks_total, in checkCounters' order.
const (
	decAllowed = iota
	decDenied
	decShadowDenied
	decNotCounted
)

var decisionNames = [...]string{"allowed", "denied", "shadow_denied", "not_counted"}

// checkCounters are quota_checks_total's series of each rule, resolved
// once, not by their labels for every entry of every check
// (BenchmarkCount: the labels' lookup against this).
type checkCounters struct {
	vec    *prometheus.CounterVec
	byRule sync.Map // rule name → *ruleCounters, written once per rule
}

type ruleCounters [len(decisionNames)]prometheus.Counter

func (c *checkCounters) of(rule string) *ruleCounters {
	if cs, ok := c.byRule.Load(rule); ok {
		return cs.(*ruleCounters)
	}
	cs := new(ruleCounters)
	for i, d := range decisionNames {
		cs[i] = c.vec.WithLabelValues(rule, d)
	}
	// rule may point into a request's buffer (an edge's own limit).
	kept, _ := c.byRule.LoadOrStore(strings.Clone(rule), cs)
	return kept.(*ruleCounters)
}

// RecordUsage feeds analytics with calls that name an app; a dry run is not
// a call and is not recorded.
func (c *Core) RecordUsage(req *limiter.Request, allowed bool) {
	if c.deps.Usage == nil || req.DryRun {
		return
	}
	app, ok := req.Lookup("app_id")
	if !ok {
		return
	}
	iface, _ := req.Lookup("interface_id")
	user, _ := req.Lookup("user_id")
	c.deps.Usage.Record(app, iface, user, allowed)
}

// RecordCall feeds analytics with one call of app, as an edge that names
// the call's app, interface and user itself found them.
func (c *Core) RecordCall(app, iface, user string, allowed bool) {
	if c.deps.Usage != nil {
		c.deps.Usage.Record(app, iface, user, allowed)
	}
}

// RecordDenied feeds Deps.Throttled with a denied check's denying rules
// (not shadow ones). An allowed check costs one branch; a dry run is not a
// call.
func (c *Core) RecordDenied(req *limiter.Request, d *limiter.Decision) {
	if d.Allowed || c.deps.Throttled == nil || req.DryRun {
		return
	}
	app, ok := req.Lookup("app_id")
	if !ok {
		return
	}
	// On the stack: a denial costs no allocation here.
	var setBuf [4]string
	var valBuf [rules.MaxDimensions]string
	set := setBuf[:0] // rules already recorded: one count per rule, not per limit
	for i := range d.Entries {
		e := &d.Entries[i]
		if e.Allowed || e.Shadow || contains(set, e.Rule) {
			continue
		}
		set = append(set, e.Rule)
		dims := c.ruleDimensions(e.Rule)
		if dims == nil {
			continue
		}
		values := valBuf[:len(dims)]
		for j, name := range dims {
			values[j], _ = req.Lookup(name)
		}
		c.deps.Throttled.Denied(app, e.Rule, dims, values)
	}
}

// RecordsThrottled reports whether denials are recorded (Deps.Throttled),
// so that an edge builds a denial's identity only when it is.
func (c *Core) RecordsThrottled() bool { return c.deps.Throttled != nil }

// RecordThrottled records one denial of app by rule (the "rule" of an
// edge's own limit: its name there) of the identity names = values.
func (c *Core) RecordThrottled(app, rule string, names, values []string) {
	if c.deps.Throttled != nil {
		c.deps.Throttled.Denied(app, rule, names, values)
	}
}

func contains(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

// ruleDimensions are the dimensions of the rule in force named name.
func (c *Core) ruleDimensions(name string) []string {
	if r := c.deps.Limiter.Rules().Rule(name); r != nil {
		return r.Dimensions
	}
	return nil
}

// Undecided counts n checks the store could not decide (err) and logs one
// line a second of them, with logAttrs after its own (during an outage
// every check lands here: the metrics count them all). It reports whether
// QUOTA_FAIL_MODE answers them anyway (open: allowed, unenforced, and
// counted as such); closed: the edge answers that no decision could be
// made.
func (c *Core) Undecided(err error, n int, logAttrs ...any) (answer bool) {
	c.deps.Metrics.StoreErrors.WithLabelValues("hot").Inc()
	if ok, suppressed := c.undecidedLog.allow(time.Now()); ok {
		attrs := append([]any{"err", err, "fail_mode", string(c.deps.Settings.FailMode), "not_logged_since_last", suppressed}, logAttrs...)
		c.deps.Log.Warn("check undecided", attrs...)
	}
	if c.deps.Settings.FailMode == config.FailClosed {
		return false
	}
	if n == 1 {
		c.deps.Metrics.Unenforced.Inc()
	} else {
		c.deps.Metrics.Unenforced.Add(float64(n))
	}
	return true
}

// SameToken reports whether got is want (not empty), in constant time.
func SameToken(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// CeilSeconds is d in whole seconds, rounded up: the seconds of the
// rate-limit headers and of Envoy's duration_until_reset.
func CeilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// logThrottle lets one log line through per second and counts the others.
type logThrottle struct {
	last       atomic.Int64 // UnixNano of the last line let through
	suppressed atomic.Int64
}

// allow reports whether a line may be logged now, and how many were not
// since the last one that was.
func (l *logThrottle) allow(now time.Time) (bool, int64) {
	n := now.UnixNano()
	last := l.last.Load()
	if n-last < int64(time.Second) || !l.last.CompareAndSwap(last, n) {
		l.suppressed.Add(1)
		return false, 0
	}
	return true, l.suppressed.Swap(0)
}
