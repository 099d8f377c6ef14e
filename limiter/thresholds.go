package limiter

import (
	"strings"
	"time"

	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
)

// Thresholds are the shares of an app's calendar quota whose crossing a
// QuotaWatcher is told of: 80 % and 100 %, as num/den.
var thresholds = [...]struct{ num, den int64 }{{4, 5}, {1, 1}}

// Crossing is an app's calendar quota (a day, week or month limit of a
// rule counted per app alone) crossing a threshold by a counted check.
// Counts are atomic in the store, so exactly one check in the whole fleet
// crosses each threshold of each app and period (unless a refund or reset
// lowers the count and it is crossed again).
type Crossing struct {
	App, Rule string
	Window    rules.Duration // rules.Day, Week or Month
	Limit     int64
	Used      int64   // after the check
	Threshold float64 // 0.8 or 1
	PeriodEnd time.Time
}

// QuotaWatcher is told of every crossing this instance's checks make. It
// runs on the check path: it must not block.
type QuotaWatcher interface {
	Crossed(Crossing)
}

// WithQuotaWatcher tells w of the crossings of apps' calendar quotas.
func WithQuotaWatcher(w QuotaWatcher) Option { return func(l *Limiter) { l.watcher = w } }

// watched reports whether a limit of rule cr is an app's calendar quota.
func (cr *compiledRule) watched(lim rules.Limit) bool {
	return lim.Window.IsCalendar() && cr.tagDim == 0 && len(cr.rule.Dimensions) == 1
}

// tellCrossings tells the watcher of the thresholds op's count crossed.
func (l *Limiter) tellCrossings(op *tiers.Op, owners []entryOwner, now time.Time) {
	if l.watcher == nil || !op.Committed {
		return
	}
	for i := range owners {
		o := &owners[i]
		if o.app == "" {
			continue
		}
		limit := o.limit.Limit
		used := limit - op.Out[i].Remaining
		before := used - op.Cost
		for _, t := range thresholds {
			if before*t.den < t.num*limit && used*t.den >= t.num*limit {
				// The app may point into a pooled request body: a copy.
				l.watcher.Crossed(Crossing{
					App: strings.Clone(o.app), Rule: o.name, Window: o.limit.Window, Limit: limit, Used: used,
					Threshold: float64(t.num) / float64(t.den), PeriodEnd: now.Add(op.Out[i].ResetAfter),
				})
			}
		}
	}
}
