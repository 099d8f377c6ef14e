package analytics

import (
	"hash/maphash"
	"sync"
)

// live is the recording side: the calls not yet folded into rows, one
// Counts per (app, interface, user, minute) in one of many small maps
// (chosen by a hash of the row, so two cores rarely meet on one lock).
type live struct {
	seed   maphash.Seed
	shards []liveShard
	mask   uint64
	maxPer int // max rows per shard
	// spare[i] is the map the flusher last took from shards[i], empty,
	// for its next take (the flusher's alone).
	spare []liveRows
}

// liveRows are a live shard's rows in the order Record added them
// (keys[i]'s counts are counts[i]), indexed by index.
type liveRows struct {
	index  map[liveKey]int32
	keys   []liveKey
	counts []Counts
}

func (r *liveRows) len() int { return len(r.keys) }

// each calls f for each row.
func (r *liveRows) each(f func(k liveKey, c Counts)) {
	for i, k := range r.keys {
		f(k, r.counts[i])
	}
}

type liveKey struct {
	id  rowID // a copy of the call's app, interface and user (not the request's strings)
	min int64 // Unix seconds of the minute's start
}

type liveShard struct {
	mu   sync.Mutex
	rows liveRows
	_    [48]byte // keep neighbouring shards' mutexes off one cache line
}

// newLive makes n shards (a power of two) holding at most maxRows rows
// together.
func newLive(n, maxRows int) *live {
	l := &live{seed: maphash.MakeSeed(), shards: make([]liveShard, n), mask: uint64(n - 1),
		maxPer: max(1, maxRows/n), spare: make([]liveRows, n)}
	for i := range l.shards {
		l.shards[i].rows = liveRows{index: map[liveKey]int32{}}
	}
	return l
}

// record adds one call of minute m; false: the shard is full and the call
// is dropped.
func (l *live) record(m int64, appID, interfaceID, userID string, allowed bool) bool {
	// The id is built on the stack (ids longer than the buffer spill to the
	// heap) and looked up as bytes: a call to an existing row allocates
	// nothing, a new row copies its id.
	var buf [192]byte
	id := appendRowID(buf[:0], appID, interfaceID, userID)
	s := &l.shards[maphash.Bytes(l.seed, id)&l.mask]
	s.mu.Lock()
	i, ok := s.rows.index[liveKey{id: rowID(id), min: m}]
	if !ok {
		if len(s.rows.keys) >= l.maxPer {
			s.mu.Unlock()
			return false
		}
		k := liveKey{id: rowID(id), min: m}
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

// take empties shard i and returns its rows (caller holds its mu). The
// shard takes over the spare map of the previous take, so that a flush
// allocates no map anew; give the rows back with putBack once folded.
func (l *live) take(i int) liveRows {
	s := &l.shards[i]
	rows := s.rows
	if l.spare[i].index == nil {
		l.spare[i] = liveRows{index: make(map[liveKey]int32, len(rows.keys)),
			keys: make([]liveKey, 0, len(rows.keys)), counts: make([]Counts, 0, len(rows.keys))}
	}
	s.rows, l.spare[i] = l.spare[i], liveRows{}
	return rows
}

// putBack keeps rows, folded, as shard i's spare.
func (l *live) putBack(i int, rows liveRows) {
	clear(rows.index)
	clear(rows.keys) // no row ids kept alive
	l.spare[i] = liveRows{index: rows.index, keys: rows.keys[:0], counts: rows.counts[:0]}
}

// scan calls f for each live row of app (under its shard's lock).
func (l *live) scan(app string, f func(k liveKey, c Counts)) {
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		s.rows.each(func(k liveKey, c Counts) {
			if k.id.app() == app {
				f(k, c)
			}
		})
		s.mu.Unlock()
	}
}

// apps adds the apps of the live rows to set.
func (l *live) apps(set map[string]struct{}) {
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for _, k := range s.rows.keys {
			set[k.id.app()] = struct{}{}
		}
		s.mu.Unlock()
	}
}
