package limiter

import (
	"strings"
	"time"

	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
)

// share is a threshold of a calendar quota, as num/den.
type share struct{ num, den int64 }

// appThresholds are the shares of an app's calendar quota whose crossing a
// QuotaWatcher is told of: 80 % and 100 %. identityThresholds are those of
// an identity's (a user's, an IP's) calendar quota: from 50 % an identity
// is near its quota (the dashboard lists the nearest).
var (
	appThresholds      = []share{{4, 5}, {1, 1}}
	identityThresholds = []share{{1, 2}, {4, 5}, {1, 1}}
)

// Crossing is a calendar quota (a day, week or month limit) crossing a
// threshold by a counted check: an app's own quota (a rule counted per app
// alone), or, with Identity set, one identity's quota within an app (a rule
// counted per app and more dimensions). Counts are atomic in the store, so
// exactly one check in the whole fleet crosses each threshold of each
// quota and period (unless a refund or reset lowers the count and it is
// crossed again).
type Crossing struct {
	App, Rule string
	// Identity are the rule's dimensions but app_id, with their values
	// (nil: the app's own quota).
	Identity  map[string]string
	Window    rules.Duration // rules.Day, Week or Month
	Limit     int64
	Used      int64   // after the check
	Threshold float64 // 0.5 (identities only), 0.8 or 1
	PeriodEnd time.Time
}

// QuotaWatcher is told of every crossing this instance's checks make. It
// runs on the check path: it must not block.
type QuotaWatcher interface {
	Crossed(Crossing)
}

// WithQuotaWatcher tells w of the crossings of apps' calendar quotas.
func WithQuotaWatcher(w QuotaWatcher) Option { return func(l *Limiter) { l.watcher = w } }

// WithIdentityQuotaWatcher tells w of the crossings of identities'
// calendar quotas (Crossing.Identity set).
func WithIdentityQuotaWatcher(w QuotaWatcher) Option {
	return func(l *Limiter) { l.identities = w }
}

// quotaKind is whose calendar quota a limit is, if anyone's.
type quotaKind uint8

const (
	notWatched    quotaKind = iota
	appQuota                // counted per app alone
	identityQuota           // counted per app and more dimensions
)

// watched says whose calendar quota a limit of rule cr is.
func (cr *compiledRule) watched(lim rules.Limit) quotaKind {
	switch {
	case !lim.Window.IsCalendar() || cr.tagDim < 0:
		return notWatched
	case len(cr.rule.Dimensions) == 1:
		return appQuota
	default:
		return identityQuota
	}
}

// tellCrossings tells the watchers of the thresholds op's count crossed.
// req is read for the dimensions of an identity that crossed one.
func (l *Limiter) tellCrossings(op *tiers.Op, owners []entryOwner, req *Request, now time.Time) {
	if (l.watcher == nil && l.identities == nil) || !op.Committed {
		return
	}
	for i := range owners {
		o := &owners[i]
		w, shares := l.watcher, appThresholds
		if o.perIdentity {
			w, shares = l.identities, identityThresholds
		}
		if o.app == "" || w == nil {
			continue
		}
		limit := o.limit.Limit
		used := limit - op.Out[i].Remaining
		before := used - op.Cost
		for _, t := range shares {
			if before*t.den < t.num*limit && used*t.den >= t.num*limit {
				// The app may point into a pooled request body: a copy.
				w.Crossed(Crossing{
					App: strings.Clone(o.app), Rule: o.name, Identity: l.identityOf(o, req),
					Window: o.limit.Window, Limit: limit, Used: used,
					Threshold: float64(t.num) / float64(t.den), PeriodEnd: now.Add(op.Out[i].ResetAfter),
				})
			}
		}
	}
}

// identityOf is req's values of o's rule's dimensions but app_id (nil for
// an app's own quota). The rule is found by name, not kept in each owner:
// a crossing is rare and the check path's op stays small. Should the
// rules have changed since the check was built, the identity may not fill
// the new rule: the nearest list's reader skips such an identity.
func (l *Limiter) identityOf(o *entryOwner, req *Request) map[string]string {
	if !o.perIdentity {
		return nil
	}
	r := l.rules.Load().set.Rule(o.name)
	if r == nil {
		return nil
	}
	id := make(map[string]string, len(r.Dimensions)-1)
	for _, d := range r.Dimensions {
		if d != "app_id" {
			v, _ := req.Lookup(d)
			id[d] = strings.Clone(v)
		}
	}
	return id
}
