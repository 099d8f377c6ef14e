package limiter

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
)

// Denials is the local denial cache: a check that Redis denied is denied
// again on this instance, without Redis, for as long as its answer can be
// computed exactly from the cached one and the time.
//
// Why that is exact. A denied check counts nothing, so a cell that denies
// every cost (remaining 0: closed) changes only with time until it opens:
// enforced checks cannot count in it, and only three things can change it
// otherwise, each of which drops the cache (Clear): a change of the rules
// (SetRules; plans and overrides must call Clear too), a report call that
// met a closed cell, and a router refund or admin reset anywhere in the
// fleet (denysync: on this instance at once, on the others within two
// QUOTA_RULES_POLL periods). An entry is kept only when
//   - the op was enforced or a dry run (report calls bypass the cache);
//   - every cell is hot and not shadow (a shadow cell counts past its
//     limit), and at least one is closed;
//   - every cell that is not closed (it allows, or denies only this cost)
//     is a fixed_window cell and the store can read it alone
//     (tiers.FixedPeeker): such a cell changes with other identities'
//     checks, so its figures are read afresh for each answer, one GET in
//     place of a script call. The op stays denied by its closed cell, so
//     it counts nothing and the cell's answer is its count's alone. Any
//     other open cell (a rule with several limits, or several rules,
//     where one still allows) keeps the denial out of the cache;
//   - at most inlineCells cells.
//
// It is served until the first moment its answer could differ from
// Redis's (entryValidity): fixed_window and min_interval until the retry
// (for any cost: their figures do not depend on it), sliding_window and
// sliding_log until the oldest counted call leaves the window, token_bucket
// until a whole token could have come back; the last three only to the
// same cost. Remaining stays, reset and retry shrink with the time.
//
// Memory is bounded by the number of entries (oldest first out).
type Denials struct {
	gen    atomic.Uint64
	hits   atomic.Uint64
	peeks  atomic.Uint64
	size   atomic.Int64
	per    int
	shards [denialShards]denialShard
	front  denialFront // denials_front.go
	// Publish, when set, tells the rest of the fleet that cached denials
	// may be wrong (denysync.Sync.Bump); it is called after Clear when a
	// report call met a closed cell.
	Publish func()
}

const denialShards = 16

type denialShard struct {
	mu   sync.Mutex
	m    map[string]*denial
	ring []string // keys in insertion order; ring[next] is the oldest once full
	next int
	_    [40]byte // keep shards' locks on separate cache lines
}

// denial is one cached answer.
type denial struct {
	gen   uint64
	at    int64 // ms: when Redis answered
	until int64 // ms: served while now < until
	cost  int64 // the only cost it answers; 0: any cost
	// slot, n and peek share a word: an entry stays in its allocation
	// size class (TestDenials_MemoryStaysWithinTheSizeUnderAMillionDeniedIdentities).
	slot int32
	n    uint8
	peek uint8 // bit i: cell i is open, its answer read afresh (FixedPeeker)
	out  [inlineCells]tiers.Outcome
}

// NewDenials returns a cache of at most size entries. Size 0 holds none
// but still tells the fleet what invalidates its caches (Publish): an
// instance with the cache off must not leave the others' stale.
func NewDenials(size int) *Denials {
	per := max(0, (size+denialShards-1)/denialShards)
	d := &Denials{per: per}
	d.front.seed = maphash.MakeSeed()
	for i := range d.shards {
		d.shards[i].m = make(map[string]*denial)
	}
	return d
}

// Clear drops every entry: call it whenever the limits a check would meet
// may have changed (rules, plans, overrides) or a counter was reset or
// given back. Checks already running do not put back what they read
// before.
func (d *Denials) Clear() { d.gen.Add(1) }

// Hits is how many checks the cache answered without Redis.
func (d *Denials) Hits() uint64 { return d.hits.Load() }

// Peeks is how many checks the cache answered with their open cells read
// from Redis (one GET each, no script call).
func (d *Denials) Peeks() uint64 { return d.peeks.Load() }

// Len is how many entries the cache holds (some may be stale: they take
// their place until they are evicted).
func (d *Denials) Len() int { return int(d.size.Load()) }

// Cap is the most entries the cache holds.
func (d *Denials) Cap() int { return d.per * denialShards }

// key appends op's cache key to b: each cell's identity, window, limit and
// algorithm. It reports false when op cannot be cached.
func denialKey(b []byte, op *tiers.Op) ([]byte, bool) {
	if len(op.Cells) == 0 || len(op.Cells) > inlineCells || op.Mode == tiers.Report || op.Mode == tiers.Refund {
		return b, false
	}
	for i := range op.Cells {
		c := &op.Cells[i]
		if c.Shadow {
			return b, false
		}
		b = append(b, c.Identity[:]...)
		b = binary.LittleEndian.AppendUint64(b, uint64(c.Window))
		b = binary.LittleEndian.AppendUint64(b, uint64(c.Limit))
		b = append(b, c.Algorithm...)
		b = append(b, 0)
	}
	return b, true
}

func (d *Denials) shard(key []byte) *denialShard {
	// FNV-1a of the key's first identity bytes: identities are MD5s.
	h := uint32(2166136261)
	for _, c := range key[:8] {
		h = (h ^ uint32(c)) * 16777619
	}
	return &d.shards[h%denialShards]
}

// lookup fills op.Out from a live entry for op at now and reports whether
// it did; peek's bits are the cells it left to be read (FixedPeeker),
// and a hit with peek 0 is counted. gen is the generation read before
// the rules were.
func (d *Denials) lookup(op *tiers.Op, now time.Time, gen uint64) (hit bool, peek uint8) {
	if d.per == 0 {
		return false, 0
	}
	var buf [inlineCells * 48]byte
	key, ok := denialKey(buf[:0], op)
	if !ok {
		return false, 0
	}
	ms := now.UnixMilli()
	s := d.shard(key)
	s.mu.Lock()
	e := s.m[string(key)]
	if e == nil || e.gen != gen || ms < e.at || ms >= e.until || (e.cost != 0 && e.cost != op.Cost) || int(e.n) != len(op.Cells) {
		s.mu.Unlock()
		return false, 0
	}
	peek = e.peek
	elapsed := time.Duration(ms-e.at) * time.Millisecond
	for i := range e.n {
		if peek&(1<<i) != 0 {
			continue
		}
		o := e.out[i]
		o.ResetAfter -= elapsed
		o.RetryAfter -= elapsed
		op.Out[i] = o
	}
	s.mu.Unlock()
	op.Committed = false
	if peek == 0 {
		d.hits.Add(1)
	}
	return true, peek
}

// remember caches op's answer, decided by the store at now, when it can
// be cached; with peeks, its open fixed-window cells are to be read
// afresh. It reports whether it did, and whether the entry has such
// cells. gen is the generation read before the rules were.
func (d *Denials) remember(op *tiers.Op, now time.Time, gen uint64, peeks bool) (kept, partial bool) {
	if d.per == 0 || op.Committed || op.Allowed() || len(op.Cells) > inlineCells {
		return false, false
	}
	e := denial{gen: gen, at: now.UnixMilli(), n: uint8(len(op.Cells))}
	valid := time.Duration(1<<62 - 1)
	for i := range op.Cells {
		c, o := &op.Cells[i], &op.Out[i]
		if o.Tier != tiers.Hot {
			return false, false
		}
		if o.Allowed || o.Remaining > 0 || o.RetryAfter <= 0 {
			if !peeks || c.Algorithm != rules.FixedWindow {
				return false, false
			}
			e.peek |= 1 << i
			continue
		}
		v, costFree := entryValidity(c, o)
		if v <= 0 {
			return false, false
		}
		valid = min(valid, v)
		if !costFree {
			e.cost = op.Cost
		}
		e.out[i] = *o
	}
	if e.peek == 1<<e.n-1 {
		return false, false // no closed cell
	}
	e.until = e.at + valid.Milliseconds()
	if d.gen.Load() != gen {
		return false, false
	}
	var buf [inlineCells * 48]byte
	key, ok := denialKey(buf[:0], op)
	if !ok {
		return false, false
	}
	partial = e.peek != 0
	s := d.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.m[string(key)]; old != nil {
		e.slot = old.slot
		*old = e
		return true, partial
	}
	k := string(key)
	if len(s.ring) < d.per {
		e.slot = int32(len(s.ring))
		s.ring = append(s.ring, k)
		d.size.Add(1)
	} else {
		oldest := s.ring[s.next]
		if o := s.m[oldest]; o != nil && int(o.slot) == s.next {
			delete(s.m, oldest)
		}
		e.slot = int32(s.next)
		s.ring[s.next] = k
		s.next = (s.next + 1) % d.per
	}
	s.m[k] = &e
	return true, partial
}

// entryValidity is how long after the store's answer o a closed cell c
// answers as o says with reset and retry shrunk by the time gone, and
// whether that answer is the same for every cost (the models:
// internal/testsupport/tiermodel).
func entryValidity(c *tiers.Cell, o *tiers.Outcome) (time.Duration, bool) {
	switch c.Algorithm {
	case rules.FixedWindow, rules.MinInterval:
		// Nothing changes until the window ends (the next call may go):
		// reset and retry are that moment whatever the cost.
		return o.RetryAfter, true
	case rules.SlidingWindow, rules.SlidingLog:
		// Nothing leaves the window before the oldest call does (reset).
		return min(o.ResetAfter, o.RetryAfter), false
	case rules.TokenBucket:
		return tokenValidity(c, o), false
	}
	return 0, false
}

// tokenValidity: the bucket holds t units of 1/W token (L*W full), the
// remaining is floor(max(t,0)/W) = 0 (closed: t < W), and reset =
// ceil((L*W - t)/L) ms places t in [lo, lo+L-1], lo = L*W - reset*L. The
// bucket gains L units a ms, so the remaining stays 0 while
// lo+L-1 + elapsed*L < W: for elapsed < ceil((W - (lo+L-1))/L).
func tokenValidity(c *tiers.Cell, o *tiers.Outcome) time.Duration {
	l, w := c.Limit, c.Window.Milliseconds()
	reset := o.ResetAfter.Milliseconds()
	if o.ResetAfter%time.Millisecond != 0 {
		return 0
	}
	hi := min(l*w-reset*l+l-1, w-1)
	n := w - hi
	if n <= 0 {
		return 0
	}
	v := (n + l - 1) / l
	return min(time.Duration(v)*time.Millisecond, o.RetryAfter)
}

// UseDenials makes l answer from d the denials it can (nil: none). Call it
// before l decides its first check.
func (l *Limiter) UseDenials(d *Denials) { l.denials = d }

// ForgetDenials drops every cached denial here: call it whenever the
// limits a check meets may change outside SetRules (an app's plan or
// override put in force on this instance). SetRules calls it itself.
func (l *Limiter) ForgetDenials() {
	if l.denials != nil {
		l.denials.Clear()
	}
}

// Denials is the denial cache l answers from, or nil.
func (l *Limiter) Denials() *Denials { return l.denials }

// denialGen is the cache's generation, read before the rules are.
func (l *Limiter) denialGen() uint64 {
	if l.denials == nil {
		return 0
	}
	return l.denials.gen.Load()
}

// cachedDenial answers op from the cache when it can: all of it, or all
// but the cells in peek, which are to be read (FixedPeeker).
func (l *Limiter) cachedDenial(op *tiers.Op, now time.Time, gen uint64) (hit bool, peek uint8) {
	if l.denials == nil {
		return false, 0
	}
	return l.denials.lookup(op, now, gen)
}

// answeredFromCache answers op from the cache, reading its open cells
// (one round trip) if it must, and reports whether it did and whether it
// read cells.
func (l *Limiter) answeredFromCache(ctx context.Context, op *tiers.Op, now time.Time, gen uint64) (answered, read bool) {
	hit, peek := l.cachedDenial(op, now, gen)
	if !hit || peek == 0 || l.peeker == nil {
		return hit && peek == 0, false
	}
	var buf [inlineCells]tiers.FixedPeek
	peeks := appendPeeks(buf[:0], op, peek)
	ok := l.readPeeks(ctx, now, peeks) && allFound(peeks)
	return ok, ok
}

// allClosed reports whether every cell of op's answer denies any cost:
// a denial answered with cells read whose read cells have closed since
// it was cached, to be cached again with nothing to read.
func allClosed(op *tiers.Op) bool {
	for i := range op.Out {
		if o := &op.Out[i]; o.Allowed || o.Remaining > 0 {
			return false
		}
	}
	return true
}

// appendPeeks appends the peeks of op's cells in peek.
func appendPeeks(peeks []tiers.FixedPeek, op *tiers.Op, peek uint8) []tiers.FixedPeek {
	for i := range op.Cells {
		if peek&(1<<i) != 0 {
			peeks = append(peeks, tiers.FixedPeek{Op: op, Cell: i})
		}
	}
	return peeks
}

func allFound(peeks []tiers.FixedPeek) bool {
	for i := range peeks {
		if !peeks[i].Found {
			return false
		}
	}
	return true
}

// readPeeks reads peeks through the store and reports whether it could;
// a store that never can is not asked again. Each op whose cells were
// all found counts as answered by the cache.
func (l *Limiter) readPeeks(ctx context.Context, now time.Time, peeks []tiers.FixedPeek) bool {
	return l.notePeeks(peeks, l.peeker.PeekFixed(ctx, now, peeks))
}

// notePeeks takes in how reading peeks went (err: the read's error) and
// reports whether they were read.
func (l *Limiter) notePeeks(peeks []tiers.FixedPeek, err error) bool {
	if err != nil {
		if errors.Is(err, tiers.ErrCannotPeek) {
			l.noPeeks.Store(true)
		}
		return false
	}
	for i := 0; i < len(peeks); {
		j, found := i, true
		for ; j < len(peeks) && peeks[j].Op == peeks[i].Op; j++ {
			found = found && peeks[j].Found
		}
		if found {
			l.denials.peeks.Add(1)
		}
		i = j
	}
	return true
}

// canPeek says whether open fixed-window cells can be read alone.
func (l *Limiter) canPeek() bool { return l.peeker != nil && !l.noPeeks.Load() }

// frontHash is req's hash in the front door's set (0 without a cache).
func (l *Limiter) frontHash(req *Request) uint64 {
	if l.denials == nil || l.denials.per == 0 {
		return 0
	}
	return l.denials.front.hash(req)
}

// decided caches op's denial, or, for a report call that counted in a cell
// that was over its limit (which may be a closed cell of a cached denial,
// here or elsewhere), drops the cache here and in the fleet. remember is
// false when op was decided after a report call of the same trip.
// req is the request while it is still the caller's (Check), else nil
// and front is its hash (denialFront), taken before it could be handed
// back (CheckBatchEach).
func (l *Limiter) decided(req *Request, front uint64, op *tiers.Op, now time.Time, gen uint64, remember bool) {
	d := l.denials
	if d == nil {
		return
	}
	if op.Mode == tiers.Report {
		for i := range op.Out {
			if !op.Out[i].Allowed {
				d.Clear()
				if d.Publish != nil {
					d.Publish()
				}
				return
			}
		}
		return
	}
	if !remember {
		return
	}
	if kept, partial := d.remember(op, now, gen, l.canPeek()); kept {
		if req != nil {
			front = d.front.hash(req)
		}
		d.front.mark(front, partial)
	}
}
