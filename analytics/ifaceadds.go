package analytics

import (
	"cmp"
	"context"
	"math"
	"slices"
	"strings"
	"time"
	"unsafe"
)

// ifaceAdds are the distinct-user adds whose app-level add Redis has and
// whose interface-level add waits for the next interface pass, which
// send makes once every IfaceUsersEvery (a minute by default), not
// with every flush.
//
// Why: with keys spread like make bench's (1,000 apps × 50 interfaces),
// every flush touches nearly every (app, interface) key with a handful of
// users, and those PFADDs were most of what analytics cost Redis
// (BenchmarkFlushServerCPU): the cost is the command, not the user. Once
// a minute the same users go in a quarter of the commands.
//
// The ids are copied into one byte buffer, so that the minute's adds hold
// no pointers for the collector to mark while they wait (a queue of row ids
// would give it a pointer and an object an add).
// Kept, with stringArena: without both, BenchmarkRecordAndFlush (callgrind)
// passed the flush CPU budget.
type ifaceAdds struct {
	buf    []byte
	adds   []ifaceAdd
	minDay Day // the earliest day of adds (when any)
}

type ifaceAdd struct {
	group  uint64
	day    Day
	off, n uint32 // the id's bytes in buf
}

// add copies a's id (under the uniques' mu), unless the buffer would
// pass the 4 GiB its offsets address (false: a is dropped).
func (q *ifaceAdds) add(a *userAdd) bool {
	if len(q.buf)+len(a.id) > math.MaxUint32 {
		return false
	}
	if len(q.adds) == 0 || a.day < q.minDay {
		q.minDay = a.day
	}
	q.adds = append(q.adds, ifaceAdd{group: a.group, day: a.day, off: uint32(len(q.buf)), n: uint32(len(a.id))})
	q.buf = append(q.buf, a.id...)
	return true
}

// id is the id of add i: a string over buf, valid until the next reset.
func (q *ifaceAdds) id(i int) rowID {
	a := &q.adds[i]
	if a.n == 0 {
		return ""
	}
	return rowID(unsafe.String(&q.buf[a.off], int(a.n)))
}

// view appends adds lo to hi to v as userAdds whose ids lie over buf: for
// the pass only (clear it before the next reset).
func (q *ifaceAdds) view(lo, hi int, v []userAdd) []userAdd {
	for i := lo; i < hi; i++ {
		v = append(v, userAdd{group: q.adds[i].group, id: q.id(i), day: q.adds[i].day})
	}
	return v
}

// ifaceViewSize is the adds one step of the interface pass views as
// userAdds: the view is kept from pass to pass, and a view of a minute's
// adds (a million and more) would be tens of MB for the collector to scan
// in every cycle. A run of one key cut by a step's end costs one PFADD more.
const ifaceViewSize = 1 << 14

// ifacePass sends the waiting adds to their interface-level HyperLogLogs,
// sorted by group and viewed a step at a time, and empties the queue when
// Redis has them all.
func (u *uniques) ifacePass(ctx context.Context, pace *pacer) error {
	now := u.clk.Now()
	q := &u.ifaceQueue
	u.mu.Lock() // readers scan the adds
	slices.SortFunc(q.adds, func(a, b ifaceAdd) int { return cmp.Compare(a.group, b.group) })
	u.mu.Unlock()
	for lo := 0; lo < len(q.adds); lo += ifaceViewSize {
		view := q.view(lo, min(lo+ifaceViewSize, len(q.adds)), u.ifaceView[:0])
		var err error
		_, err = u.pfaddRuns(ctx, pace, view, scopeIface)
		clear(view) // no strings over the buffer kept past the pass
		u.ifaceView = view[:0]
		if err != nil {
			return err // the whole pass is made again
		}
	}
	u.mu.Lock()
	q.reset()
	u.mu.Unlock()
	u.lastIfacePass = now
	return nil
}

// reset empties q, keeping its room (the flusher's, under mu).
func (q *ifaceAdds) reset() {
	q.buf, q.adds = q.buf[:0], q.adds[:0]
}

// due reports whether the interface pass is due at now: IfaceUsersEvery
// has passed since the last one, or an add is of a day before now's, whose
// keys persist saves now that the day is over.
func (u *uniques) ifaceDue(now time.Time) bool {
	if len(u.ifaceQueue.adds) == 0 {
		return false
	}
	return now.Sub(u.lastIfacePass) >= u.opt.IfaceUsersEvery || u.ifaceQueue.minDay < DayOf(now)
}

// pendingIfaceUsers adds to extra the users still waiting for the
// interface pass of the interface-level keys like k from k.day to last
// (caller holds u.mu's read lock). The users are copied: the buffer is
// reused once the pass is done.
func (u *uniques) pendingIfaceUsers(k hllKey, last Day, extra map[hllKey][]string) {
	q := &u.ifaceQueue
	for i := range q.adds {
		day := q.adds[i].day
		if day < k.day || day > last {
			continue
		}
		app, iface, user := q.id(i).split()
		if app == k.app && iface == k.iface {
			dk := k
			dk.day = day
			extra[dk] = append(extra[dk], strings.Clone(user))
		}
	}
}
