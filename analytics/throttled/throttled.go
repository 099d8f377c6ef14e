// Package throttled records who is throttled: for each (day, app, rule)
// the identities (the rule's dimension values) most denied, and how often.
//
// Each instance keeps, in memory, a Space-Saving summary (Metwally, Agrawal
// and El Abbadi, 2005) per (day, app, rule) that has seen a denial: at
// most TopK identities, each with a count that is an upper bound of its
// denials and an overcount bound (the count of the identity it replaced).
// Every identity denied more than N/TopK times of the summary's N is in the
// summary, and one that entered before the summary was full and was never
// replaced is counted exactly: under a skewed load, the heavy hitters.
//
// Every flush adds each entry's counts since the last flush to the MySQL
// table throttled_identities (sql/009_throttled.sql) of the app's shard,
// keyed (app, day, rule, identity hash), so the instances' summaries add
// up; a key's rows are pruned to the KeepRows most denied (store.go).
//
// Memory: at most TopK entries a summary and MaxEntries entries over all
// summaries (a full budget makes a new summary record nothing, counted in
// quota_analytics_throttled_dropped_total). What it costs a check: nothing
// for an allowed check (the API does not call it); a denied one takes one of
// 16 locks, hashes its identity, and updates a map and a heap (O(log TopK)).
package throttled

import (
	"container/heap"
	"encoding/binary"
	"hash/maphash"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quota-platform/quota/analytics/usage"
	"github.com/quota-platform/quota/clock"
)

// Options bound the summaries; zero values take the defaults.
type Options struct {
	// TopK is the capacity of one (day, app, rule) summary (default 1024).
	TopK int
	// MaxEntries bounds the entries of all summaries together (default
	// 131,072: about 24 MB with short values, measured 183 bytes an
	// identity of an app id and an 8-byte user id).
	MaxEntries int
	// KeepRows is the rows kept in MySQL per (app, day, rule) (default 1000).
	KeepRows int
	// KeepDays is how many days of rows MySQL keeps: the first flush of a
	// day deletes older ones (default 400).
	KeepDays int
}

func (o Options) withDefaults() Options {
	orDefault(&o.TopK, 1024)
	orDefault(&o.MaxEntries, 131_072)
	orDefault(&o.KeepRows, 1000)
	orDefault(&o.KeepDays, 400)
	return o
}

// orDefault sets *v to def unless it is positive.
func orDefault(v *int, def int) {
	if *v <= 0 {
		*v = def
	}
}

// Throttled records the denials of each (day, app, rule) by identity and
// answers the most denied. Safe for concurrent use.
type Throttled struct {
	clk     clock.Clock
	days    usage.Days // the analytics day (QUOTA_TIMEZONE)
	dbs     usage.Shards
	opt     Options
	seed    maphash.Seed
	shards  [16]throttledShard
	dropped prometheus.Counter

	budgetMu sync.Mutex
	entries  int // entries of all summaries (budgetMu)

	flushMu   sync.Mutex       // one flush at a time
	expired   usage.Day        // the day whose old rows were last deleted (flushMu)
	uncertain []throttledBatch // batches whose COMMIT answer was lost (flushMu)
}

type throttledShard struct {
	mu   sync.Mutex
	sums map[sumKey]*summary
	_    [40]byte
}

type sumKey struct {
	day       usage.Day
	app, rule string
}

// summary is one Space-Saving summary: a min-heap on count, indexed by
// identity.
type summary struct {
	h     ssHeap
	index map[string]*ssEntry
	// evicted are the unflushed counts of entries replaced since the last
	// flush (at most evictedCap); past that they are dropped and counted.
	evicted []ssDelta
	// newRows counts the identities this instance wrote to MySQL since it
	// last pruned the key.
	newRows int
}

type ssEntry struct {
	id          string // appendIdentityKey of the dimension values
	count, over int64  // denials (an upper bound) and the overcount bound
	// flushedCount and flushedOver are what the last flushes wrote.
	flushedCount, flushedOver int64
	written                   bool // has a row in MySQL (from this instance)
	pos                       int  // index in the heap
}

// evictedCap bounds the replaced entries' unflushed counts a summary holds
// between two flushes.
const evictedCap = 64

type ssDelta struct {
	id          string
	count, over int64
	written     bool
}

type ssHeap []*ssEntry

func (h ssHeap) Len() int           { return len(h) }
func (h ssHeap) Less(i, j int) bool { return h[i].count < h[j].count }
func (h ssHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}
func (h *ssHeap) Push(x any) { e := x.(*ssEntry); e.pos = len(*h); *h = append(*h, e) }
func (h *ssHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

func New(clk clock.Clock, days usage.Days, dbs usage.Shards, opt Options, reg prometheus.Registerer) *Throttled {
	t := &Throttled{clk: clk, days: days, dbs: dbs, opt: opt.withDefaults(), seed: maphash.MakeSeed(),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "quota_analytics_throttled_dropped_total",
			Help: "Denials not recorded in the who-is-throttled summaries (their memory budget was full), and replaced entries' counts not written."})}
	for i := range t.shards {
		t.shards[i].sums = map[sumKey]*summary{}
	}
	if reg != nil {
		reg.MustRegister(t.dropped)
	}
	return t
}

// appendIdentityKey appends an identity key to b: the dimension names and
// values, length-prefixed, in the rule's order: one identity, no ambiguity
// whatever the values hold.
func appendIdentityKey(b []byte, names, values []string) []byte {
	for i := range names {
		b = binary.AppendUvarint(b, uint64(len(names[i])))
		b = append(b, names[i]...)
		b = binary.AppendUvarint(b, uint64(len(values[i])))
		b = append(b, values[i]...)
	}
	return b
}

// decodeIdentity is the dimensions of an identity key.
func decodeIdentity(id string) map[string]string {
	out := map[string]string{}
	b := []byte(id)
	next := func() (string, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return "", false
		}
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s, true
	}
	for len(b) > 0 {
		name, ok := next()
		if !ok {
			break
		}
		value, ok := next()
		if !ok {
			break
		}
		out[name] = value
	}
	return out
}

// The widths of throttled_identities' app_id and rule columns.
const maxThrottledApp, maxThrottledRule = 256, 512

// Denied records one denial of app by rule, for the identity of the rule's
// dimension names and their values (same length), on today's summary.
func (t *Throttled) Denied(app, rule string, names, values []string) {
	if len(app) > maxThrottledApp || len(rule) > maxThrottledRule { // wider than the table's columns
		t.dropped.Inc()
		return
	}
	// The identity is built on the stack: a denial of an identity already
	// counted allocates nothing (app and values may point into a
	// request's buffer: what is kept is copied).
	var buf [256]byte
	t.denied(t.days.Of(t.clk.Now()), app, rule, appendIdentityKey(buf[:0], names, values))
}

func (t *Throttled) denied(day usage.Day, app, rule string, idb []byte) {
	sh := t.shardOf(app)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s := sh.sums[sumKey{day, app, rule}]
	if s == nil {
		if !t.reserve() {
			t.dropped.Inc()
			return
		}
		s = &summary{index: map[string]*ssEntry{}, evicted: make([]ssDelta, 0, evictedCap)}
		sh.sums[sumKey{day, strings.Clone(app), rule}] = s
		id := string(idb)
		e := &ssEntry{id: id, count: 1}
		heap.Push(&s.h, e)
		s.index[id] = e
		return
	}
	if e := s.index[string(idb)]; e != nil {
		e.count++
		heap.Fix(&s.h, e.pos)
		return
	}
	id := string(idb)
	if len(s.h) < t.opt.TopK && t.reserve() {
		e := &ssEntry{id: id, count: 1}
		heap.Push(&s.h, e)
		s.index[id] = e
		return
	}
	// Full: the new identity replaces the least counted one and inherits its
	// count as its overcount bound (Space-Saving).
	e := s.h[0]
	if d := (ssDelta{e.id, e.count - e.flushedCount, e.over - e.flushedOver, e.written}); d.count > 0 {
		if len(s.evicted) < cap(s.evicted) {
			s.evicted = append(s.evicted, d)
		} else {
			t.dropped.Add(float64(d.count))
		}
	}
	delete(s.index, e.id)
	*e = ssEntry{id: id, count: e.count + 1, over: e.count, pos: e.pos}
	s.index[id] = e
	heap.Fix(&s.h, e.pos)
}

// reserve takes one entry of the memory budget.
func (t *Throttled) reserve() bool {
	t.budgetMu.Lock()
	defer t.budgetMu.Unlock()
	if t.entries >= t.opt.MaxEntries {
		return false
	}
	t.entries++
	return true
}

func (t *Throttled) release(n int) {
	t.budgetMu.Lock()
	t.entries -= n
	t.budgetMu.Unlock()
}

// Entries is the number of identities held in memory over all summaries.
func (t *Throttled) Entries() int {
	t.budgetMu.Lock()
	defer t.budgetMu.Unlock()
	return t.entries
}

// throttledRow is one identity's counts to add to MySQL (a delta) or read.
type throttledRow struct {
	key         sumKey
	id          string
	count, over int64
	newRow      bool // first written by this instance
}

// takeDeltas returns every entry's counts since the last flush, and marks
// them flushed (undone by restore when the write fails). Summaries of days
// before today, once taken, are dropped.
func (t *Throttled) takeDeltas(today usage.Day) []throttledRow {
	var out []throttledRow
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for k, s := range sh.sums {
			for _, d := range s.evicted {
				out = append(out, throttledRow{k, d.id, d.count, d.over, !d.written})
			}
			s.evicted = s.evicted[:0]
			for _, e := range s.h {
				if e.count == e.flushedCount && e.over == e.flushedOver {
					continue
				}
				out = append(out, throttledRow{k, e.id, e.count - e.flushedCount, e.over - e.flushedOver, !e.written})
				e.flushedCount, e.flushedOver, e.written = e.count, e.over, true
			}
			if k.day < today {
				delete(sh.sums, k)
				t.release(len(s.h))
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// restore puts back deltas that were not written.
func (t *Throttled) restore(rows []throttledRow) {
	for _, r := range rows {
		sh := t.shardOf(r.key.app)
		sh.mu.Lock()
		s := sh.sums[r.key]
		if s == nil { // dropped after its day: the delta waits in evicted
			s = &summary{index: map[string]*ssEntry{}, evicted: make([]ssDelta, 0, evictedCap)}
			sh.sums[r.key] = s
		}
		if e := s.index[r.id]; e != nil {
			e.flushedCount -= r.count
			e.flushedOver -= r.over
			if r.newRow {
				e.written = false
			}
		} else if len(s.evicted) < cap(s.evicted) {
			s.evicted = append(s.evicted, ssDelta{r.id, r.count, r.over, !r.newRow})
		} else {
			t.dropped.Add(float64(r.count))
		}
		sh.mu.Unlock()
	}
}

// unflushed are the counts of app's summaries of day not yet written.
func (t *Throttled) unflushed(app string, day usage.Day) []throttledRow {
	sh := t.shardOf(app)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var out []throttledRow
	for k, s := range sh.sums {
		if k.app != app || k.day != day {
			continue
		}
		for _, d := range s.evicted {
			out = append(out, throttledRow{key: k, id: d.id, count: d.count, over: d.over})
		}
		for _, e := range s.h {
			if e.count != e.flushedCount || e.over != e.flushedOver {
				out = append(out, throttledRow{key: k, id: e.id, count: e.count - e.flushedCount, over: e.over - e.flushedOver})
			}
		}
	}
	return out
}
