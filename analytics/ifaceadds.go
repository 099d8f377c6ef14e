package analytics

import (
	"math"
	"strings"
	"unsafe"

	"github.com/quota-platform/quota/analytics/usage"
)

// ifaceAdds are the distinct-user adds waiting for the interface pass,
// their ids copied into one buffer so that the minute's adds hold no
// pointers for the collector to mark while they wait. Kept: without it and
// chunkBuffers the flush took 1.11× main's, with them 1.00× (BenchmarkRecordAndPeriodicFlush).
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

// add copies a's id, unless the buffer would pass the 4 GiB its offsets
// address (false: a is dropped).
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
func (q *ifaceAdds) id(i int) usage.RowID {
	a := &q.adds[i]
	if a.n == 0 {
		return ""
	}
	return usage.RowID(unsafe.String(&q.buf[a.off], int(a.n)))
}

// view appends adds lo to hi to v as userAdds whose ids lie over buf (clear
// it before the next reset).
func (q *ifaceAdds) view(lo, hi int, v []userAdd) []userAdd {
	for i := lo; i < hi; i++ {
		v = append(v, userAdd{group: q.adds[i].group, id: q.id(i), day: q.adds[i].day})
	}
	return v
}

// reset empties q, keeping its room.
func (q *ifaceAdds) reset() { q.buf, q.adds = q.buf[:0], q.adds[:0] }

// pending adds to extra the users of q of the interface-level keys like k
// from k.day to last, copied: the buffer is reused.
func (q *ifaceAdds) pending(k hllKey, last Day, extra map[hllKey][]string) {
	for i := range q.adds {
		day := q.adds[i].day
		if day < k.day || day > last {
			continue
		}
		if app, iface, user := q.id(i).Split(); app == k.app && iface == k.iface {
			dk := k
			dk.day = day
			extra[dk] = append(extra[dk], strings.Clone(user))
		}
	}
}
