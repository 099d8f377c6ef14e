package analytics

import (
	"cmp"
	"context"
	"slices"
	"time"
)

// ifaceAdds are the distinct-user adds whose app-level add Redis has and
// whose interface-level add waits for the next interface pass, which
// pfaddPending makes once every IfaceUsersEvery (a minute by default), not
// with every flush.
//
// Why: with keys spread like make bench's (1,000 apps × 50 interfaces),
// every flush touches nearly every (app, interface) key with a handful of
// users, and those PFADDs were most of what analytics cost Redis
// (BenchmarkFlushServerCPU): the cost is the command, not the user. Once
// a minute the same users go in a quarter of the commands.
type ifaceAdds struct {
	adds   []userAdd
	minDay Day // the earliest day of adds (when any)
}

// add queues a (the flusher's, under the Recorder's mu).
func (q *ifaceAdds) add(a *userAdd) {
	if len(q.adds) == 0 || a.day < q.minDay {
		q.minDay = a.day
	}
	q.adds = append(q.adds, *a)
}

// ifacePass sends the waiting adds to their interface-level HyperLogLogs,
// sorted by group, and empties the queue when Redis has them all.
func (r *Recorder) ifacePass(ctx context.Context, pace *pacer) error {
	now := r.clk.Now()
	q := &r.ifaceQueue
	r.mu.Lock() // readers scan the adds
	slices.SortFunc(q.adds, func(a, b userAdd) int { return cmp.Compare(a.group, b.group) })
	r.mu.Unlock()
	if _, err := r.pfaddRuns(ctx, pace, q.adds, scopeIface); err != nil {
		return err // the whole pass is made again
	}
	r.mu.Lock()
	clear(q.adds) // no row ids kept alive
	q.adds = q.adds[:0]
	r.mu.Unlock()
	r.lastIfacePass = now
	return nil
}

// ifaceDue reports whether the interface pass is due at now: IfaceUsersEvery
// has passed since the last one, or an add is of a day before now's, whose
// keys persistHLL saves now that the day is over.
func (r *Recorder) ifaceDue(now time.Time) bool {
	if len(r.ifaceQueue.adds) == 0 {
		return false
	}
	return now.Sub(r.lastIfacePass) >= r.opt.IfaceUsersEvery || r.ifaceQueue.minDay < DayOf(now)
}

// pendingIfaceUsers adds to extra the users still waiting for the
// interface pass of the interface-level keys like k from k.day to last
// (caller holds r.mu).
func (r *Recorder) pendingIfaceUsers(k hllKey, last Day, extra map[hllKey][]string) {
	for i := range r.ifaceQueue.adds {
		a := &r.ifaceQueue.adds[i]
		if a.day < k.day || a.day > last {
			continue
		}
		app, iface, user := a.id.split()
		if app == k.app && iface == k.iface {
			dk := k
			dk.day = a.day
			extra[dk] = append(extra[dk], user)
		}
	}
}
