// Package limiter answers "may this call go through?": it finds the rules
// that apply to a call, turns them into counter cells, and has the tier store
// decide them all-or-nothing.
package limiter

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/hot"
)

// Dim is one dimension of a call: a name and its value.
type Dim struct {
	Name, Value string
}

// Request is one limit check: of the rules that apply to Dims, or, when
// Counters is set, of those counters only (the rules are not consulted).
type Request struct {
	Dims   []Dim
	Cost   int64
	DryRun bool
	Report bool
	// Counters are counters the caller names itself (the Envoy rate limit
	// service: its configuration, not quota's rules, says which counters a
	// request has), decided all-or-nothing like a rule check's cells.
	// Scope keeps them apart from the rules' counters: rule names match
	// [a-z][a-z0-9_]*, so a scope with another character never meets one.
	Counters []Counter
	Scope    string
}

// Lookup returns the value of dimension name.
func (r *Request) Lookup(name string) (string, bool) {
	for i := range r.Dims {
		if r.Dims[i].Name == name {
			return r.Dims[i].Value, true
		}
	}
	return "", false
}

// Entry is the answer of one limit of one rule.
type Entry struct {
	Rule       string
	Window     time.Duration
	Limit      int64
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration
	Tier       tiers.Tier
	Allowed    bool
	Shadow     bool
}

// Decision is the answer to one Request.
type Decision struct {
	Allowed bool
	Entries []Entry
}

// Limiter decides checks. It is safe for concurrent use; rules are replaced
// atomically with SetRules.
type Limiter struct {
	store tiers.Store
	clock clock.Clock
	loc   *time.Location // of calendar windows (QUOTA_TIMEZONE)
	// watcher, when set, is told of apps' calendar quotas crossing 80 %
	// and 100 %; identities, of identities' calendar quotas crossing 50 %,
	// 80 % and 100 % (thresholds.go).
	watcher, identities QuotaWatcher
	rules               atomic.Pointer[compiledSet]
	// denials answers the denials it can without the store (nil: none;
	// denials.go).
	denials *Denials
	// peeker reads a cached denial's open fixed-window cells (the store,
	// when it can; nil: such denials are not cached); noPeeks: it said it
	// never will (tiers.ErrCannotPeek).
	peeker  tiers.FixedPeeker
	noPeeks atomic.Bool
	// opBufs are the buffers of ops that live only until their answers
	// are copied out (*opBuf; getOpBuf).
	opBufs sync.Pool

	// mu orders SetRules and SetAssignments, which compile both together.
	mu          sync.Mutex
	assignments *rules.Assignments
}

// Option changes how a Limiter is made.
type Option func(*Limiter)

// InLocation counts calendar windows (day, week, month) in loc instead of UTC.
func InLocation(loc *time.Location) Option { return func(l *Limiter) { l.loc = loc } }

// New returns a Limiter deciding with store under rules set.
func New(store tiers.Store, clk clock.Clock, set *rules.Set, opts ...Option) (*Limiter, error) {
	l := &Limiter{store: store, clock: clk, loc: time.UTC}
	l.peeker, _ = store.(tiers.FixedPeeker)
	for _, o := range opts {
		o(l)
	}
	if err := l.SetRules(set); err != nil {
		return nil, err
	}
	return l, nil
}

// Rules returns the rules in force.
func (l *Limiter) Rules() *rules.Set { return l.rules.Load().set }

// Location is the time zone of calendar windows.
func (l *Limiter) Location() *time.Location { return l.loc }

// Assignments returns the plans and overrides in force (nil: none).
func (l *Limiter) Assignments() *rules.Assignments { return l.rules.Load().assignments }

// CheckRules reports whether set could be put in force with SetRules.
func (l *Limiter) CheckRules(set *rules.Set) error {
	_, err := compile(set, nil)
	return err
}

// SetRules replaces the rules in force. Checks already running finish under
// the old rules.
func (l *Limiter) SetRules(set *rules.Set) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, err := compile(set, l.assignments)
	if err != nil {
		return err
	}
	l.rules.Store(c)
	l.ForgetDenials()
	return nil
}

// SetAssignments replaces the apps' plans and overrides in force. An app
// on a plan the rules do not define, or an override of a rule that is not
// in force or that does not validate, gets the rules' own limits.
func (l *Limiter) SetAssignments(a *rules.Assignments) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.assignments = a
	c := *l.rules.Load() // the rules in force, compiled: only the apps change
	c.assignments, c.apps = a, compileApps(c.set, a)
	// No ForgetDenials: a cached denial is keyed by its cells' limits and
	// windows (denials.go), so an app whose limits changed misses it.
	l.rules.Store(&c)
}

// compiledRule is a rule prepared for the check path.
type compiledRule struct {
	rule    *rules.Rule
	limits  []rules.Limit
	tagDim  int // index in rule.Dimensions of app_id, or -1
	userDim int // index in rule.Dimensions of user_id, or -1
	// calendar are the identity scopes of the rule's calendar cells
	// ("name@day", "name@week", "name@month"), made once, not per check.
	calendar [3]string
}

// calendarScope is the identity scope of the rule's cells of calendar window w.
// (rules.Day, Week and Month are -1, -2 and -3.)
func (cr *compiledRule) calendarScope(w rules.Duration) string { return cr.calendar[-int(w)-1] }

type compiledSet struct {
	set   *rules.Set
	rules []compiledRule
	// apps holds, for each app whose plan or overrides change a limit,
	// the limits of each rule (by index; nil: the rule's own). Apps on the
	// default plan without overrides are not in it.
	apps        map[string][][]rules.Limit
	assignments *rules.Assignments
}

func compile(set *rules.Set, a *rules.Assignments) (*compiledSet, error) {
	c := &compiledSet{set: set, rules: make([]compiledRule, len(set.Rules)), assignments: a}
	for i := range set.Rules {
		r := &set.Rules[i]
		if !hot.SupportsAlgorithm(r.Algorithm) {
			return nil, fmt.Errorf("rule %q: algorithm %s is not available in this build", r.Name, r.Algorithm)
		}
		cr := compiledRule{rule: r, limits: r.EffectiveLimits(), tagDim: -1, userDim: -1}
		for i, w := range []rules.Duration{rules.Day, rules.Week, rules.Month} {
			cr.calendar[i] = r.Name + "@" + w.String()
		}
		for j, d := range r.Dimensions {
			switch d {
			case "app_id":
				cr.tagDim = j
			case "user_id":
				cr.userDim = j
			}
		}
		c.rules[i] = cr
	}
	c.apps = compileApps(set, a)
	return c, nil
}

// compileApps resolves each assigned app's limits under set.
func compileApps(set *rules.Set, a *rules.Assignments) map[string][][]rules.Limit {
	if a == nil {
		return nil
	}
	apps := make(map[string][][]rules.Limit)
	add := func(app string) {
		if _, done := apps[app]; done {
			return
		}
		p := a.Policy(app)
		var byRule [][]rules.Limit
		for i := range set.Rules {
			ls, from := set.LimitsFor(&set.Rules[i], p)
			if from == rules.DefaultPlan {
				continue
			}
			if byRule == nil {
				byRule = make([][]rules.Limit, len(set.Rules))
			}
			byRule[i] = ls
		}
		apps[app] = byRule
	}
	for app := range a.Plans {
		add(app)
	}
	for app := range a.Overrides {
		add(app)
	}
	for app, byRule := range apps {
		if byRule == nil {
			delete(apps, app)
		}
	}
	if len(apps) == 0 {
		return nil
	}
	return apps
}

// Check decides one request. (CheckBatch would do, at the cost of the
// batch's slices and callbacks on a path that runs once per check when
// checks are not coalesced.)
func (l *Limiter) Check(ctx context.Context, req *Request) (Decision, error) {
	gen := l.denialGen()
	now := l.clock.Now()
	buf := l.getOpBuf()
	defer l.opBufs.Put(buf)
	op, owners := buildOpIn(buf, l.rules.Load(), req, now, l.loc, false)
	if len(op.Cells) == 0 {
		return decision(op, owners), nil
	}
	answered, read := l.answeredFromCache(ctx, op, now, gen)
	switch {
	case !answered:
		if err := l.store.Check(ctx, now, []*tiers.Op{op}); err != nil {
			return Decision{}, fmt.Errorf("check: %w", err)
		}
		l.tellCrossings(op, owners, req, now)
		l.decided(req, 0, op, now, gen, true)
	case read && allClosed(op):
		l.decided(req, 0, op, now, gen, true)
	}
	return decision(op, owners), nil
}

// CheckBatch decides requests in order, each as if sent alone, in one trip
// to the store. If any request could not be decided it returns that error
// (the first request's that failed) and no decisions.
func (l *Limiter) CheckBatch(ctx context.Context, reqs []*Request) ([]Decision, error) {
	out := make([]Decision, len(reqs))
	var err error
	failed := len(reqs)
	l.CheckBatchEach(ctx, reqs, func(i int, d Decision, e error) {
		out[i] = d
		if e != nil && i < failed {
			failed, err = i, e
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CheckBatchEach decides requests as CheckBatch does, in order, each as if
// sent alone, in one trip to the store, and calls deliver(i, d, err) exactly
// once for each request i as soon as that request is decided (a check the
// hot tier decides alone does not wait for another's cold transaction;
// tiers.EachChecker). err is that request's own: another failing does not
// fail it. Calls come from the calling goroutine, not necessarily in index
// order, and CheckBatchEach returns after the last; deliver must not block
// long. reqs[i] is not read after deliver(i) is called.
func (l *Limiter) CheckBatchEach(ctx context.Context, reqs []*Request, deliver func(i int, d Decision, err error)) {
	gen := l.denialGen()
	set := l.rules.Load()
	now := l.clock.Now()
	ops := make([]*tiers.Op, len(reqs))
	owners := make([][]entryOwner, len(reqs))
	bufs := make([]*opBuf, len(reqs))
	defer func() {
		for _, b := range bufs {
			l.opBufs.Put(b)
		}
	}()
	// A report call counts past limits: the denials of a batch holding one
	// are neither answered from nor put in the cache.
	cache := l.denials != nil && l.denials.per > 0 && !slices.ContainsFunc(reqs, func(r *Request) bool { return r.Report })
	var done []bool // done[i]: ops[i] answered without the store
	var fronts []uint64
	var peeks []tiers.FixedPeek // the open cells of cached denials, in order
	var partial []bool          // partial[i]: ops[i] is a cached denial with cells in peeks
	if cache {
		fronts = make([]uint64, len(reqs))
	}
	for i, req := range reqs {
		bufs[i] = l.getOpBuf()
		ops[i], owners[i] = buildOpIn(bufs[i], set, req, now, l.loc, false)
		hit, peek := len(ops[i].Cells) == 0, uint8(0)
		if cache {
			fronts[i] = l.frontHash(req)
			// The front door's set first: a request not denied lately
			// costs no key and no lock.
			if !hit && l.denials.front.hasHash(fronts[i]) {
				hit, peek = l.cachedDenial(ops[i], now, gen)
			}
		}
		if hit && peek != 0 && l.peeker != nil {
			if partial == nil {
				partial = make([]bool, len(reqs))
			}
			peeks, partial[i] = appendPeeks(peeks, ops[i], peek), true
			continue
		}
		if hit && peek == 0 {
			if done == nil {
				done = make([]bool, len(reqs))
			}
			done[i] = true
		}
	}
	// fromStore hands over the store's answer for ops[i].
	fromStore := func(i int, err error) {
		if err != nil {
			deliver(i, Decision{}, fmt.Errorf("check: %w", err))
			return
		}
		l.tellCrossings(ops[i], owners[i], reqs[i], now)
		var front uint64
		if cache {
			front = fronts[i]
		}
		l.decided(nil, front, ops[i], now, gen, cache)
		deliver(i, decision(ops[i], owners[i]), nil)
	}
	if len(peeks) > 0 {
		read, readAt := peeksToRead(ops, partial, peeks, done)
		if pc, ok := l.store.(tiers.PeekingChecker); ok && len(read) > 0 {
			b := &batchAnswers{now: now, gen: gen, ops: ops, owners: owners, fronts: fronts, deliver: deliver, fromStore: fromStore}
			if l.checkPeeking(ctx, pc, b, done, read, readAt) {
				return
			}
		}
		if done == nil {
			done = make([]bool, len(ops))
		}
		if len(read) > 0 && l.readPeeks(ctx, now, read) {
			markRead(done, read, readAt)
		}
		for i := range ops {
			if partial[i] && done[i] && allClosed(ops[i]) {
				l.decided(nil, fronts[i], ops[i], now, gen, true)
			}
		}
	}
	// pending are the ops the store decides; at[k] is pending[k]'s request
	// (nil when it decides every op: then k itself).
	pending, at := ops, []int(nil)
	if done != nil {
		pending, at = nil, []int{}
		for i, op := range ops {
			if !done[i] {
				pending, at = append(pending, op), append(at, i)
			}
		}
		for i, op := range ops {
			if done[i] {
				deliver(i, decision(op, owners[i]), nil)
			}
		}
	}
	if len(pending) == 0 {
		return
	}
	_ = tiers.CheckEach(ctx, l.store, now, pending, func(k int, err error) {
		if at != nil {
			k = at[k]
		}
		fromStore(k, err)
	})
}

// batchAnswers is what CheckBatchEach hands over its answers with.
type batchAnswers struct {
	now       time.Time
	gen       uint64 // the denial cache's generation, read before the rules
	ops       []*tiers.Op
	owners    [][]entryOwner
	fronts    []uint64 // the requests' hashes in the front door's set
	deliver   func(i int, d Decision, err error)
	fromStore func(i int, err error) // hands over the store's answer for ops[i]
}

// fromCache hands over the answer of ops[i], a cached denial whose open
// cells were read.
func (l *Limiter) fromCache(b *batchAnswers, i int) {
	op := b.ops[i]
	if allClosed(op) {
		l.decided(nil, b.fronts[i], op, b.now, b.gen, true)
	}
	b.deliver(i, decision(op, b.owners[i]), nil)
}

// checkPeeking decides a batch whose cached denials have open cells to
// read (read, of the ops at readAt) and whose other ops go to the store,
// not done before, in one round trip (tiers.PeekingChecker): the reads
// come before any op counts, as when they go first on their own. A read
// denial whose cells were not all found is checked after the others, in
// a second trip. That could change an answer when such a denial shares a
// cell with an op after it (each op is decided as if sent alone, in
// order): then checkPeeking does nothing and reports false, and the
// caller reads first, then checks.
func (l *Limiter) checkPeeking(ctx context.Context, pc tiers.PeekingChecker, b *batchAnswers, done []bool, read []tiers.FixedPeek, readAt []int) bool {
	isRead := make([]bool, len(b.ops))
	for _, i := range readAt {
		isRead[i] = true
	}
	var first []*tiers.Op
	var firstAt []int
	for i, op := range b.ops {
		if !isRead[i] && (done == nil || !done[i]) {
			first, firstAt = append(first, op), append(firstAt, i)
		}
	}
	if len(first) == 0 || !readsCommute(b.ops, isRead, firstAt) {
		return false
	}
	for i, op := range b.ops {
		if done != nil && done[i] {
			b.deliver(i, decision(op, b.owners[i]), nil)
		}
	}
	// The reads are answered as soon as the store hands over its first
	// op (they are read by then), not after its slow parts.
	answered := make([]bool, len(b.ops))
	var reads bool
	answerReads := func() {
		if reads {
			return
		}
		reads = true
		markRead(answered, read, readAt)
		for i := range b.ops {
			if isRead[i] && answered[i] {
				l.fromCache(b, i)
			}
		}
	}
	readErr, _ := pc.CheckEachPeeking(ctx, b.now, read, first, func(k int, err error) {
		answerReads()
		b.fromStore(firstAt[k], err)
	})
	answerReads()
	l.notePeeks(read, readErr)
	var again []*tiers.Op
	var againAt []int
	for i, op := range b.ops {
		if isRead[i] && !answered[i] {
			again, againAt = append(again, op), append(againAt, i)
		}
	}
	if len(again) > 0 {
		_ = tiers.CheckEach(ctx, l.store, b.now, again, func(k int, err error) { b.fromStore(againAt[k], err) })
	}
	return true
}

// readsCommute reports whether every op read (isRead) shares no cell with
// an op of first (firstAt: their indexes) after it, so that checking it
// after them, if its cells are not found, answers what checking it in its
// place would. Batches of more than 64 ops are not compared (false).
func readsCommute(ops []*tiers.Op, isRead []bool, firstAt []int) bool {
	if len(ops) > 64 {
		return false
	}
	for i, op := range ops {
		if !isRead[i] {
			continue
		}
		for _, j := range firstAt {
			if j > i && shareACell(op, ops[j]) {
				return false
			}
		}
	}
	return true
}

// shareACell reports whether a and b have a cell in common.
func shareACell(a, b *tiers.Op) bool {
	for x := range a.Cells {
		for y := range b.Cells {
			if a.Cells[x].Key == b.Cells[y].Key && a.Cells[x].Tag == b.Cells[y].Tag {
				return true
			}
		}
	}
	return false
}

// peeksToRead returns the peeks (the open cells of cached denials, of the
// ops marked partial) that may be read before the store's round trip,
// with at[k] the index in ops of read[k]'s op: an op is read only when no
// op before it in the batch that the store decides counts in those cells
// (each op is answered as if sent alone, in order). (An op answered from
// the cache, read or not, is denied and counts nothing.)
func peeksToRead(ops []*tiers.Op, partial []bool, peeks []tiers.FixedPeek, done []bool) (read []tiers.FixedPeek, at []int) {
	read, at = make([]tiers.FixedPeek, 0, len(peeks)), make([]int, 0, len(peeks))
	k := 0
	for i := range ops {
		if !partial[i] {
			continue
		}
		end := k + 1
		for end < len(peeks) && peeks[end].Op == ops[i] {
			end++
		}
		if !countedBefore(ops[:i], peeks[k:end], done, partial) {
			read = append(read, peeks[k:end]...)
			for range end - k {
				at = append(at, i)
			}
		}
		k = end
	}
	return read, at
}

// markRead marks done the ops (at: read's ops' indexes) whose read cells
// were all found.
func markRead(done []bool, read []tiers.FixedPeek, at []int) {
	for k := range read {
		done[at[k]] = true
	}
	for k := range read {
		if !read[k].Found {
			done[at[k]] = false
		}
	}
}

// countedBefore reports whether an op in before that the store decides
// (not done, not a cached denial) has one of the cells of peeks.
func countedBefore(before []*tiers.Op, peeks []tiers.FixedPeek, done, partial []bool) bool {
	for j, op := range before {
		if (done != nil && done[j]) || partial[j] {
			continue
		}
		for c := range op.Cells {
			for _, p := range peeks {
				pc := &p.Op.Cells[p.Cell]
				if op.Cells[c].Key == pc.Key && op.Cells[c].Tag == pc.Tag {
					return true
				}
			}
		}
	}
	return false
}

// entryOwner says which rule (or explicit counter) and limit a cell belongs to.
type entryOwner struct {
	name  string
	limit rules.Limit
	app   string // the app, when the limit is its or its identities' calendar quota (thresholds.go)
	// perIdentity: the limit is a calendar quota of each of the app's
	// identities, not of the app's own (thresholds.go).
	perIdentity bool
}

// inlineCells is how many cells an op holds before its slices grow: the
// default rules give a check 2 (one per matching rule and limit).
const inlineCells = 4

// opBuf is an op with room for inlineCells cells, outcomes and owners, so
// a check's op costs one allocation instead of one per slice growth.
type opBuf struct {
	op     tiers.Op
	cells  [inlineCells]tiers.Cell
	out    [inlineCells]tiers.Outcome
	owners [inlineCells]entryOwner
}

// getOpBuf returns a buffer for an op that lives only until its answer is
// copied out (decision), to be put back in l.opBufs then: a check's op
// and its cells are ~1 KiB, a third of the bytes BenchmarkEdgeCheck
// allocated a check.
func (l *Limiter) getOpBuf() *opBuf {
	if b, _ := l.opBufs.Get().(*opBuf); b != nil {
		return b
	}
	return new(opBuf)
}

// buildOp makes req's op at now. With cacheOnly, the cells carry only
// what the denial cache reads (identity, window, limit, algorithm, shadow)
// and no placement or counter key: three of a cell's four MD5s, for an op
// that is answered from the cache or not at all (Denied).
func buildOp(set *compiledSet, req *Request, now time.Time, loc *time.Location, cacheOnly bool) (*tiers.Op, []entryOwner) {
	return buildOpIn(new(opBuf), set, req, now, loc, cacheOnly)
}

// buildOpIn is buildOp in buf, whatever buf held before.
func buildOpIn(buf *opBuf, set *compiledSet, req *Request, now time.Time, loc *time.Location, cacheOnly bool) (*tiers.Op, []entryOwner) {
	buf.op = tiers.Op{Cost: req.Cost, Mode: tiers.Enforce}
	op := &buf.op
	op.Cells = buf.cells[:0]
	switch {
	case req.Report:
		op.Mode = tiers.Report
	case req.DryRun:
		op.Mode = tiers.DryRun
	}
	owners := buf.owners[:0]
	var values [rules.MaxDimensions]string
	scan := set.rules
	if req.Counters != nil {
		owners = appendCounterCells(op, owners, req, now, cacheOnly)
		scan = nil
	}
	for i := range scan {
		cr := &scan[i]
		if !cr.rule.Applies(req.Lookup) {
			continue
		}
		vals := values[:len(cr.rule.Dimensions)]
		for j, d := range cr.rule.Dimensions {
			vals[j], _ = req.Lookup(d)
		}
		id := tiers.IdentityOf(cr.rule.Name, vals)
		var app, user string
		limits := cr.limits
		if cr.tagDim >= 0 {
			app = vals[cr.tagDim]
			if cr.userDim >= 0 {
				user = vals[cr.userDim]
			}
			if byRule, ok := set.apps[app]; ok && byRule[i] != nil {
				limits = byRule[i]
			}
		}
		var tag tiers.Tag
		var shardKey uint64
		if !cacheOnly {
			tag, shardKey = place(id, cr.tagDim >= 0, app, user)
		}
		for _, lim := range limits {
			cell := tiers.Cell{
				Algorithm: cr.rule.Algorithm,
				Limit:     lim.Limit,
				Shadow:    cr.rule.Shadow,
				Tag:       tag,
				ShardKey:  shardKey,
			}
			switch {
			case lim.Window.IsCalendar():
				calendarCell(&cell, cr.calendarScope(lim.Window), vals, lim.Window, now, loc, cacheOnly)
			case cacheOnly:
				cell.Window, cell.Identity = time.Duration(lim.Window), id
			case cr.rule.Algorithm == rules.FixedWindow:
				cell.Window, cell.Identity = time.Duration(lim.Window), id
				cell.ID, cell.Key = fixedKey(id, cell.Window, now)
			default:
				cell.Window, cell.Identity = time.Duration(lim.Window), id
				cell.Key = tiers.CounterKeyOf(cr.rule.Name, vals, int64(cell.Window/time.Second), 0)
			}
			op.Cells = append(op.Cells, cell)
			owner := entryOwner{name: cr.rule.Name, limit: lim}
			switch cr.watched(lim) {
			case appQuota:
				owner.app = app
			case identityQuota:
				owner.app, owner.perIdentity = app, true
			}
			owners = append(owners, owner)
		}
	}
	if len(op.Cells) <= inlineCells {
		op.Out = buf.out[:len(op.Cells)]
		clear(op.Out)
	} else {
		op.Out = make([]tiers.Outcome, len(op.Cells))
	}
	return op, owners
}

// calendarCell makes c the cell of a calendar window's period that holds
// now. The tiers know fixed windows aligned on the Unix epoch only, so the
// period is handed to them as the fixed window [0, end): the one window of
// that length, which holds now, ends when the period does (so every tier's
// reset, retry and TTL is exact across a 23- or 25-hour day) and is a cell
// of its own for each period (its length is in the cell id), so a new
// period starts from zero. The identity is the rule's with the calendar
// kind, so a day and a month that end together stay two cells.
func calendarCell(c *tiers.Cell, scope string, vals []string, w rules.Duration, now time.Time, loc *time.Location, cacheOnly bool) {
	_, end := w.Period(now, loc)
	c.Window = time.Duration(end.Unix()) * time.Second
	c.Identity = tiers.IdentityOf(scope, vals)
	if !cacheOnly {
		c.ID, c.Key = fixedKey(c.Identity, c.Window, now)
	}
}

func decision(op *tiers.Op, owners []entryOwner) Decision {
	d := Decision{Allowed: op.Allowed(), Entries: make([]Entry, len(op.Cells))}
	for i := range op.Cells {
		o := op.Out[i]
		d.Entries[i] = Entry{
			Rule:       owners[i].name,
			Window:     time.Duration(owners[i].limit.Window),
			Limit:      owners[i].limit.Limit,
			Remaining:  o.Remaining,
			ResetAfter: o.ResetAfter,
			RetryAfter: o.RetryAfter,
			Tier:       o.Tier,
			Allowed:    o.Allowed,
			Shadow:     op.Cells[i].Shadow,
		}
	}
	return d
}

// MostRestrictive returns the index of the entry with the least remaining
// (ties: the soonest reset), or -1 when there are none.
func (d *Decision) MostRestrictive() int {
	best := -1
	for i := range d.Entries {
		e := &d.Entries[i]
		if best < 0 {
			best = i
			continue
		}
		b := &d.Entries[best]
		if e.Remaining < b.Remaining || (e.Remaining == b.Remaining && e.ResetAfter < b.ResetAfter) {
			best = i
		}
	}
	return best
}

// RetryAfter is how long a denied caller should wait: the longest wait among
// the entries that denied.
func (d *Decision) RetryAfter() time.Duration {
	var r time.Duration
	for i := range d.Entries {
		e := &d.Entries[i]
		if !e.Allowed && !e.Shadow && e.RetryAfter > r {
			r = e.RetryAfter
		}
	}
	return r
}

// Counter is one counter a caller names itself instead of having the rules
// find it (the Envoy rate limit service: its configuration, not quota's
// rules, says which counters a request has). It is a fixed window aligned
// on the Unix epoch.
type Counter struct {
	Name string // what answers and metrics call it (bounded, not a request value)
	// Identity, with the request's Scope, is whose counter it is: two
	// counters share a count exactly when Scope and every value are equal.
	Identity []string
	Limit    int64
	Window   time.Duration // a whole number of seconds
	Shadow   bool          // counted, never denies
	// App and User place the cell as a rule's app_id and user_id do (hash
	// tag, cold shard); empty App places it by its identity.
	App, User string
}

// appendCounterCells appends req's explicit counters to op.
func appendCounterCells(op *tiers.Op, owners []entryOwner, req *Request, now time.Time, cacheOnly bool) []entryOwner {
	for j := range req.Counters {
		c := &req.Counters[j]
		cell := tiers.Cell{
			Algorithm: rules.FixedWindow,
			Limit:     c.Limit,
			Window:    c.Window,
			Shadow:    c.Shadow,
			Identity:  tiers.IdentityOf(req.Scope, c.Identity),
		}
		if !cacheOnly {
			cell.Tag, cell.ShardKey = place(cell.Identity, c.App != "", c.App, c.User)
			cell.ID, cell.Key = fixedKey(cell.Identity, c.Window, now)
		}
		op.Cells = append(op.Cells, cell)
		owners = append(owners, entryOwner{name: c.Name, limit: rules.Limit{Limit: c.Limit, Window: rules.Duration(c.Window)}})
	}
	return owners
}

// place is where a cell lives: by its app (hash tag) and app and user (cold
// shard) when it has an app, else by its identity.
func place(id tiers.Identity, byApp bool, app, user string) (tiers.Tag, uint64) {
	if byApp {
		return tiers.TagOf(app), tiers.ShardKeyOf(app, user)
	}
	return tiers.TagOfIdentity(id), tiers.ShardKeyOfIdentity(id)
}

// fixedKey is a fixed-window cell's id and its counter key at now, derived
// from the id so that a mover finds it (tiers.FixedKeyOf).
func fixedKey(id tiers.Identity, w time.Duration, now time.Time) (tiers.CellID, tiers.CounterKey) {
	cid := tiers.CellIDOf(id, w)
	return cid, tiers.FixedKeyOf(cid, now.UnixMilli()/w.Milliseconds())
}
