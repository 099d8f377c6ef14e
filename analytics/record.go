package analytics

import (
	"hash/maphash"
	"math/bits"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quota-platform/quota/analytics/usage"
	"github.com/quota-platform/quota/clock"
)

// Recorder counts the decided calls in memory, one Counts per (app,
// interface, user, minute), in one of many small maps (chosen by a hash
// of the row, so two cores rarely meet on one lock). The Flusher takes the
// maps' rows; Stats reads them.
type Recorder struct {
	clk     clock.Clock
	dropped prometheus.Counter // calls not counted: their map was full
	seed    maphash.Seed
	shards  []liveShard
	mask    uint64
	maxPer  int // max rows per shard
	// spare[i] is the map the flusher last took from shards[i], empty,
	// for its next take (the flusher's alone).
	spare []liveRows
}

// liveRows are a shard's rows in the order Record added them (keys[i]'s
// counts are counts[i]), indexed by index.
type liveRows struct {
	index  map[liveKey]int32
	keys   []liveKey
	counts []Counts
}

// each calls f for each row.
func (r *liveRows) each(f func(k liveKey, c Counts)) {
	for i, k := range r.keys {
		f(k, r.counts[i])
	}
}

type liveKey struct {
	id  usage.RowID // a copy of the call's app, interface and user (not the request's strings)
	min int64       // Unix seconds of the minute's start
}

type liveShard struct {
	mu   sync.Mutex
	rows liveRows
	_    [48]byte // keep neighbouring shards' mutexes off one cache line
}

// newRecorder makes o.LiveShards maps (rounded up to a power of two)
// holding at most o.MaxPendingRows rows together.
func newRecorder(o Options, met *collectors) *Recorder {
	n := 1 << bits.Len(uint(o.LiveShards-1))
	r := &Recorder{clk: o.Clock, dropped: met.dropped, seed: maphash.MakeSeed(), shards: make([]liveShard, n),
		mask: uint64(n - 1), maxPer: max(1, o.MaxPendingRows/n), spare: make([]liveRows, n)}
	for i := range r.shards {
		r.shards[i].rows = liveRows{index: map[liveKey]int32{}}
	}
	return r
}

// Record adds one decided call. It never blocks on I/O: it takes one of
// many small locks for a map update.
func (r *Recorder) Record(appID, interfaceID, userID string, allowed bool) {
	m := usage.FloorDiv(r.clk.Now().Unix(), 60) * 60
	if !r.record(m, appID, interfaceID, userID, allowed) {
		r.dropped.Inc()
	}
}

// record adds one call of minute m; false: the shard is full and the call
// is dropped.
func (r *Recorder) record(m int64, appID, interfaceID, userID string, allowed bool) bool {
	// The id is built on the stack: a call to an existing row allocates
	// nothing, a new row copies its id.
	var buf [192]byte
	id := usage.AppendRowID(buf[:0], appID, interfaceID, userID)
	s := &r.shards[maphash.Bytes(r.seed, id)&r.mask]
	s.mu.Lock()
	i, ok := s.rows.index[liveKey{id: usage.RowID(id), min: m}]
	if !ok {
		if len(s.rows.keys) >= r.maxPer {
			s.mu.Unlock()
			return false
		}
		k := liveKey{id: usage.RowID(id), min: m}
		i = int32(len(s.rows.keys))
		s.rows.index[k] = i
		s.rows.keys = append(s.rows.keys, k)
		s.rows.counts = append(s.rows.counts, Counts{})
	}
	c := &s.rows.counts[i]
	c.Calls++
	if allowed {
		c.Allowed++
	} else {
		c.Denied++
	}
	s.mu.Unlock()
	return true
}

// take empties shard i and returns its rows (caller holds its mu); the
// shard takes over the spare of the previous take (putBack).
func (r *Recorder) take(i int) liveRows {
	s := &r.shards[i]
	rows := s.rows
	if r.spare[i].index == nil {
		r.spare[i] = liveRows{index: make(map[liveKey]int32, len(rows.keys)),
			keys: make([]liveKey, 0, len(rows.keys)), counts: make([]Counts, 0, len(rows.keys))}
	}
	s.rows, r.spare[i] = r.spare[i], liveRows{}
	return rows
}

// putBack keeps rows, folded, as shard i's spare.
func (r *Recorder) putBack(i int, rows liveRows) {
	clear(rows.index)
	clear(rows.keys) // no row ids kept alive
	r.spare[i] = liveRows{index: rows.index, keys: rows.keys[:0], counts: rows.counts[:0]}
}

// scan calls f for each row of app (under its shard's lock).
func (r *Recorder) scan(app string, f func(k liveKey, c Counts)) {
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		s.rows.each(func(k liveKey, c Counts) {
			if k.id.App() == app {
				f(k, c)
			}
		})
		s.mu.Unlock()
	}
}

// apps adds the apps of the rows to set.
func (r *Recorder) apps(set map[string]struct{}) {
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		for _, k := range s.rows.keys {
			set[k.id.App()] = struct{}{}
		}
		s.mu.Unlock()
	}
}
