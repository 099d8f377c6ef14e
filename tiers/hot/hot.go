// Package hot is the hot tier: every counter its own Redis key, every
// algorithm checked by one script call (Store), and its side of a move
// (Side, a tiers.MoveSide over Mover: export, import, delete, the freeze;
// and the quiet cells' moves to cold). Its scripts (hot_check/, hot_fixed.lua, hot_freeze.lua,
// hot_state.lua) are embedded here; those that read the directory are
// built with warm.CheckScript or warm.DirScript.
package hot

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/redisscript"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/warm"
)

// hot_check.lua, the script of every check that is not all fixed windows,
// is kept as one file per algorithm between a shared head and tail, so that
// an algorithm reads on its own; NewStore joins them, in this order,
// into the one script each check runs (one EVALSHA).
var (
	//go:embed hot_check/*.lua
	hotCheckFiles embed.FS
	hotCheckParts = [...]string{"preamble", "fixed_window", "sliding_window", "token_bucket", "sliding_log", "min_interval", "dispatch"}
)

// hotCheckSource returns hot_check.lua: its parts joined.
func hotCheckSource() string {
	var b strings.Builder
	for _, name := range hotCheckParts {
		part, err := hotCheckFiles.ReadFile("hot_check/" + name + ".lua")
		if err != nil {
			panic(err) // embedded at build time: cannot happen
		}
		b.Write(part)
		b.WriteByte('\n')
	}
	return b.String()
}

//go:embed hot_fixed.lua
var hotFixedSource string

// algorithmCodes are the algorithm numbers of hot_check.lua's ARGV.
var algorithmCodes = map[rules.Algorithm]int{
	rules.FixedWindow:   1,
	rules.SlidingWindow: 2,
	rules.TokenBucket:   3,
	rules.SlidingLog:    4,
	rules.MinInterval:   5,
}

// SupportsAlgorithm reports whether the hot tier can count a rule's algorithm.
func SupportsAlgorithm(a rules.Algorithm) bool { _, ok := algorithmCodes[a]; return ok }

// Store keeps every counter as its own Redis key ("expanded"):
//
//	key   = prefix + "{" + hex(tag, 3 bytes) + "}" + CounterKey (16 raw bytes)
//	value = the count, an integer string; TTL = until the window ends + jitter
//
// so a counter costs one small string key (~26 bytes of name plus Redis'
// per-key overhead). One check is one EVALSHA: of hot_fixed.lua when every
// cell is a fixed window, else of hot_check.lua, which knows every
// algorithm. That is the fixed window; the other algorithms keep one key per
// (identity, window) in the forms hot_check.lua describes: a hash of multi-level buckets
// (sliding_window), "tokens:last" (token_bucket), a ring of call times
// (sliding_log), "next:prev" (min_interval), each expiring once it could
// no longer change an answer.
type Store struct {
	rdb         redis.UniversalClient
	script      *redis.Script // hot_check.lua: every algorithm, refunds, the directory
	fixed       *redis.Script // hot_fixed.lua: fixed-window cells only
	prefix      string
	jitter      time.Duration
	splitBySlot bool
	// dir, when set (a Router's hot store), is where fixed-window cells
	// look up their tier: each such cell carries its warm bucket field, and
	// the script answers "not here" for a cell found elsewhere.
	dir *warm.Store
	// wait: a call's count is final once this many replicas hold it
	// (hot_wait.go); zero: off.
	wait waitOptions
	// refunded is Options.Refunded.
	refunded func()
	// callTimeout bounds a whole call (Options.CallTimeout).
	callTimeout time.Duration
}

// Options configures a Store.
type Options struct {
	Prefix string        // prepended to every key, e.g. "q:"
	Jitter time.Duration // random 0..Jitter added to each new key's TTL
	// SplitBySlot sends the cells of one check as one script call per hash
	// tag. It is forced on for a Redis Cluster client (a multi-key script
	// must stay in one slot); on a single Redis one call holds every cell.
	SplitBySlot bool
	// WaitReplicas, when > 0, makes a call's count final only once that
	// many replicas acknowledge it within WaitTimeout (WAIT in the call's
	// pipeline, hot_wait.go); a call they do not acknowledge fails as
	// ErrUnavailable, so the fail mode answers it.
	WaitReplicas int
	WaitTimeout  time.Duration
	// Refunded, when set, is called after every refund (a split op's
	// parts, a Router's compensation), applied or not: the cells' counts
	// were too high for a moment, and a denial cached meanwhile must go
	// (limiter.Denials, denysync).
	Refunded func()
	// CallTimeout bounds each check's round trip as a whole
	// (QUOTA_REDIS_TIMEOUT): the wait for a pooled connection, a dial, the
	// write and the read together, so that a check that first waited for
	// a connection does not then read for a whole timeout more (the
	// client must set ContextTimeoutEnabled, as redisconn.New does). On a
	// Redis Cluster it also ends go-redis' cluster client's retries: that
	// client sends a pipeline that timed out again, up to MaxRedirects
	// times, each after a new dial, so behind a silent partition a check
	// waited seconds and a script whose answer was lost could run twice.
	// Redirects (MOVED, ASK) that answer within the bound are still
	// followed.
	CallTimeout time.Duration
}

// NewStore returns a hot store over rdb.
func NewStore(rdb redis.UniversalClient, o Options) *Store {
	_, cluster := rdb.(*redis.ClusterClient)
	return &Store{
		rdb:         rdb,
		script:      warm.CheckScript(hotCheckSource()),
		fixed:       warm.CheckScript(hotFixedSource),
		prefix:      o.Prefix,
		jitter:      o.Jitter,
		splitBySlot: o.SplitBySlot || cluster,
		wait:        waitOptions{replicas: int64(o.WaitReplicas), timeout: o.WaitTimeout},
		refunded:    o.Refunded,
		callTimeout: o.CallTimeout,
	}
}

// WithDirectory returns a copy of s (its options kept) whose fixed-window
// cells look up their tier in warm's directory: a Router's hot store.
func (s *Store) WithDirectory(warm *warm.Store) *Store {
	h := *s
	h.dir = warm
	return &h
}

// NotifyRefund calls Options.Refunded.
func (s *Store) NotifyRefund() {
	if s.refunded != nil {
		s.refunded()
	}
}

// Tier returns Hot.
func (s *Store) Tier() tiers.Tier { return tiers.Hot }

// Load makes sure the scripts are cached in Redis so that checks go by
// EVALSHA from the first call. A missing script (Redis restarted) is still
// handled: checks load it again on NOSCRIPT.
func (s *Store) Load(ctx context.Context) error {
	for _, sc := range []*redis.Script{s.script, s.fixed} {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return fmt.Errorf("hot load script: %w", tiers.WrapUnavailable(err))
		}
	}
	return nil
}

// Key returns the Redis key of a cell.
func (s *Store) Key(c *tiers.Cell) string {
	var b [64]byte
	k := append(b[:0], s.prefix...)
	k = append(k, '{')
	k = appendHex(k, c.Tag[:])
	k = append(k, '}')
	k = append(k, c.Key[:]...)
	return string(k)
}

func appendHex(b, src []byte) []byte {
	const digits = "0123456789abcdef"
	for _, c := range src {
		b = append(b, digits[c>>4], digits[c&15])
	}
	return b
}

// Call is one script invocation: a slice of one op's cells.
type Call struct {
	Op    *tiers.Op
	opAt  int   // Op's index in the ops Plan was given
	cells []int // indexes into op.Cells
	cmd   *redis.Cmd
	fixed bool // sent to hot_fixed.lua (its reply is counts, not outcomes)
	// counted: the script counted the call's (hot) cells, the reply's
	// last value, kept by decode so that the router need not convert
	// the reply again.
	counted bool
	// Err: the call failed (its node down, a bad reply); set by RunEach.
	Err error
}

// Check decides ops in one pipeline (one round trip). A check whose cells
// span several hash tags on a cluster is split per tag: those parts are
// decided separately and, if one denies while another counted, the counted
// parts are refunded, so the check still counts all or nothing.
//
// Ops are decided in order, each as if sent alone: an op that is split
// ends a round trip, so that its refund (if any) is made before the ops
// after it are decided. Ops that are not split share one round trip.
func (s *Store) Check(ctx context.Context, now time.Time, ops []*tiers.Op) error {
	if !s.splitBySlot {
		return s.check(ctx, now, ops)
	}
	start := 0
	for i, op := range ops {
		if i == len(ops)-1 || !sameTag(op.Cells) {
			if err := s.check(ctx, now, ops[start:i+1]); err != nil {
				return err
			}
			start = i + 1
		}
	}
	return nil
}

// CheckEach decides ops as Check does, reporting each op on its own
// (EachChecker): on a Redis Cluster a batch goes to several masters, and a
// failed call fails only its own op (having given back what the op's other
// calls counted), so that one dead master leaves the others' checks
// decided.
func (s *Store) CheckEach(ctx context.Context, now time.Time, ops []*tiers.Op, done func(i int, err error)) error {
	var first error
	start := 0
	for i, op := range ops {
		if i == len(ops)-1 || (s.splitBySlot && !sameTag(op.Cells)) {
			base := start
			_, err := s.checkEach(ctx, now, nil, ops[start:i+1], func(k int, err error) { done(base+k, err) })
			first = cmp.Or(first, err)
			start = i + 1
		}
	}
	return first
}

// CheckEachPeeking is CheckEach with peeks read before any op counts
// (tiers.PeekingChecker): on a single Redis in the ops' round trip
// (RunEachPeeking); on a cluster, where ops may be split by slot, in one
// of its own first.
func (s *Store) CheckEachPeeking(ctx context.Context, now time.Time, peeks []tiers.FixedPeek, ops []*tiers.Op, done func(i int, err error)) (readErr, err error) {
	if s.splitBySlot || len(ops) == 0 {
		readErr = s.PeekFixed(ctx, now, peeks)
		return readErr, s.CheckEach(ctx, now, ops, done)
	}
	return s.checkEach(ctx, now, peeks, ops, done)
}

// checkEach is check reporting each op to done, with peeks read first
// (RunEachPeeking).
func (s *Store) checkEach(ctx context.Context, now time.Time, peeks []tiers.FixedPeek, ops []*tiers.Op, done func(i int, err error)) (readErr, err error) {
	calls := s.Plan(ops)
	readErr, err = s.RunEachPeeking(ctx, now, peeks, calls)
	if err != nil {
		for i := range ops {
			done(i, err)
		}
		return readErr, err
	}
	var first error
	byOp := CallsByOp(calls, len(ops))
	for i, op := range ops {
		mine := byOp[i]
		var err error
		var refunds []Call
		for _, c := range mine {
			err = cmp.Or(err, c.Err)
		}
		if err != nil {
			// Give back what the op's other calls counted.
			for _, c := range mine {
				if c.Committed() {
					refunds = append(refunds, Call{Op: op, cells: c.cells})
				}
			}
		} else {
			op.Committed = op.Mode != tiers.DryRun && op.Allowed()
			if op.Mode == tiers.Enforce && !op.Committed {
				refunds = s.partsToRefund(op, mine)
			}
		}
		if len(refunds) > 0 {
			if rerr := s.refund(ctx, now, refunds); rerr != nil {
				err = cmp.Or(err, rerr)
			}
		}
		first = cmp.Or(first, err)
		done(i, err)
	}
	return readErr, first
}

func (s *Store) check(ctx context.Context, now time.Time, ops []*tiers.Op) error {
	calls := s.Plan(ops)
	if err := s.Run(ctx, now, calls); err != nil {
		return err
	}
	var refunds []Call
	byOp := CallsByOp(calls, len(ops))
	for i, op := range ops {
		mine := byOp[i]
		op.Committed = op.Mode != tiers.DryRun && op.Allowed()
		if op.Mode == tiers.Enforce && !op.Committed {
			refunds = append(refunds, s.partsToRefund(op, mine)...)
		}
	}
	if len(refunds) > 0 {
		return s.refund(ctx, now, refunds)
	}
	return nil
}

// Plan groups ops' cells into script calls (a Router runs them with Run
// or RunEach, then reads each op's Route).
func (s *Store) Plan(ops []*tiers.Op) []Call {
	calls := make([]Call, 0, len(ops))
	for k, op := range ops {
		if len(op.Out) != len(op.Cells) {
			op.Out = make([]tiers.Outcome, len(op.Cells))
		}
		if !s.splitBySlot || sameTag(op.Cells) {
			calls = append(calls, Call{Op: op, opAt: k})
			continue
		}
		byTag := map[tiers.Tag][]int{}
		var order []tiers.Tag
		for i := range op.Cells {
			t := op.Cells[i].Tag
			if _, ok := byTag[t]; !ok {
				order = append(order, t)
			}
			byTag[t] = append(byTag[t], i)
		}
		for _, t := range order {
			calls = append(calls, Call{Op: op, opAt: k, cells: byTag[t]})
		}
	}
	return calls
}

// CallsByOp splits calls (Plan's for n ops) into each op's: Plan makes an
// op's calls together and in the order of the ops, so one pass finds
// every op's, where looking for each op's among all is quadratic in the
// batch.
func CallsByOp(calls []Call, n int) [][]Call {
	by := make([][]Call, n)
	for i := range by {
		k := 0
		for k < len(calls) && calls[k].opAt == i {
			k++
		}
		by[i], calls = calls[:k:k], calls[k:]
	}
	return by
}

func sameTag(cells []tiers.Cell) bool {
	for i := 1; i < len(cells); i++ {
		if cells[i].Tag != cells[0].Tag {
			return false
		}
	}
	return true
}

// each calls fn with the index of every op cell in c (all when c.cells is nil).
func (c *Call) Each(fn func(i int)) {
	if c.cells == nil {
		for i := range c.Op.Cells {
			fn(i)
		}
		return
	}
	for _, i := range c.cells {
		fn(i)
	}
}

func (s *Store) args(c *Call, now time.Time, mode tiers.Mode) ([]string, []any) {
	n := len(c.Op.Cells)
	if c.cells != nil {
		n = len(c.cells)
	}
	keys := make([]string, 0, n)
	args := make([]any, 0, 3+5*n)
	args = append(args, now.UnixMilli(), c.Op.Cost, int(mode))
	var dirArgs []any
	var dirKeys []string
	pos := 0
	c.Each(func(i int) {
		cell := &c.Op.Cells[i]
		pos++
		if s.dir != nil && cell.Algorithm == rules.FixedWindow {
			dirKeys = append(dirKeys, s.dir.TagHeaderKey(cell.Tag))
			dirArgs = append(dirArgs, pos, s.dir.Field(cell.CellID()), c.Op.NotColdAt(i))
		}
	})
	c.Each(func(i int) {
		cell := &c.Op.Cells[i]
		keys = append(keys, s.Key(cell))
		args = append(args, algorithmCodes[cell.Algorithm], cell.Limit, cell.Window.Milliseconds(), s.ttlJitter(), boolInt(cell.Shadow))
	})
	if len(dirKeys) > 0 {
		args[2] = int(mode) + 16
		keys = append(keys, dirKeys...)
		args = append(args, dirArgs...)
		args = append(args, len(dirKeys))
	}
	return keys, args
}

// Run sends calls (Plan's) and decodes their replies.
func (s *Store) Run(ctx context.Context, now time.Time, calls []Call) error {
	if err := s.RunEach(ctx, now, calls); err != nil {
		return err
	}
	for i := range calls {
		if calls[i].Err != nil {
			return calls[i].Err
		}
	}
	return nil
}

// RunEach sends calls in one round trip and decodes each reply, leaving a
// call's failure in its err: on a Redis Cluster the calls go to several
// masters, and one master down must fail only the calls whose keys it
// holds. It returns an error only when no call could be sent.
func (s *Store) RunEach(ctx context.Context, now time.Time, calls []Call) error {
	_, err := s.RunEachPeeking(ctx, now, nil, calls)
	return err
}

// RunEachPeeking is RunEach with peeks read first (PeekFixed; readErr is
// the read's error): on a single Redis without WAIT, in the calls' own
// pipeline, an MGET ahead of their scripts; elsewhere (a cluster's
// masters, a WAIT after the scripts) in a round trip of its own before
// theirs.
func (s *Store) RunEachPeeking(ctx context.Context, now time.Time, peeks []tiers.FixedPeek, calls []Call) (readErr, err error) {
	for i := range calls {
		for _, c := range calls[i].Op.Cells {
			if !SupportsAlgorithm(c.Algorithm) {
				err := fmt.Errorf("hot check: algorithm %q not supported", c.Algorithm)
				return err, err
			}
		}
	}
	cc, cluster := s.rdb.(*redis.ClusterClient)
	together := len(peeks) > 0 && len(calls) > 0 && !cluster && !s.splitBySlot && s.wait.replicas == 0
	if len(peeks) > 0 && !together {
		readErr = s.PeekFixed(ctx, now, peeks)
	}
	caller := ctx
	if s.callTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.callTimeout)
		defer cancel()
	}
	var mget *redis.SliceCmd
	if s.wait.replicas > 0 {
		if err := s.runWaited(ctx, now, calls); err != nil {
			return readErr, err
		}
	} else if cluster {
		s.runClustered(ctx, cc, now, calls)
	} else if len(calls) == 1 && !together {
		sc, keys, args := s.request(&calls[0], now)
		calls[0].cmd = sc.Run(ctx, s.rdb, keys, args...)
	} else {
		var keys []string
		if together {
			keys = s.peekKeys(peeks)
		}
		if mget, err = s.runPipelined(ctx, now, calls, true, keys); err != nil {
			return err, err
		}
	}
	s.decodeAll(caller, now, calls)
	if together {
		readErr = fillPeeks(now, peeks, mget)
	}
	return readErr, nil
}

// decodeAll decodes each call's reply into its op. Consecutive fixed
// calls may share one script call (runPipelined): each takes its values
// from the reply in turn, and a reply that does not decode fails the
// calls after it in that script call too, their values being out of step.
func (s *Store) decodeAll(caller context.Context, now time.Time, calls []Call) {
	var shared *redis.Cmd
	var vals []any
	var err error
	for i := range calls {
		c := &calls[i]
		if s.callTimeout > 0 && caller.Err() == nil {
			noAnswerWithin(c.cmd, s.callTimeout)
		}
		if !c.fixed {
			c.Err = s.decode(c)
			continue
		}
		if c.cmd != shared {
			shared = c.cmd
			vals, err = c.cmd.Slice()
			if err != nil {
				err = fmt.Errorf("hot check: %w", tiers.WrapUnavailable(err))
			}
		}
		if err != nil {
			c.Err = err
			continue
		}
		var n int
		if n, c.Err = s.decodeFixed(c, now, vals); c.Err != nil {
			err = c.Err
			continue
		}
		vals = vals[n:]
	}
}

// noAnswer is a call that its master did not answer within the call's
// deadline (Options.CallTimeout, QUOTA_REDIS_TIMEOUT) while the caller was
// still waiting: a backend that hangs, which is what a read timeout says
// too. It is a net.Error whose Timeout is true and it does not unwrap to
// context.DeadlineExceeded, which the breaker takes for the caller's own
// deadline (routing.Breaker opens at once on the backend's timeout).
type noAnswer struct {
	within time.Duration
	err    error
}

func (e noAnswer) Error() string {
	return fmt.Sprintf("no answer within %s (%v)", e.within, e.err)
}
func (e noAnswer) Timeout() bool   { return true }
func (e noAnswer) Temporary() bool { return true }

// noAnswerWithin turns cmd's error into noAnswer when it is the call's own
// deadline: go-redis reports it as context.DeadlineExceeded when the
// deadline ended the call between two steps (waiting for a connection of
// a full pool, a dial, a retry) rather than in a socket read.
func noAnswerWithin(cmd *redis.Cmd, d time.Duration) {
	if err := cmd.Err(); err != nil && errors.Is(err, context.DeadlineExceeded) {
		cmd.SetErr(noAnswer{within: d, err: err})
	}
}

// request chooses the script of a check's call and builds its keys and
// arguments: hot_fixed.lua when every cell is a fixed window and the call
// counts (not a refund), else hot_check.lua.
func (s *Store) request(c *Call, now time.Time) (*redis.Script, []string, []any) {
	c.fixed = s.fixedOnly(c)
	if c.fixed {
		f := s.newFixedCall(1, c.size())
		s.addFixed(f, c, now)
		keys, args := f.request()
		return s.fixed, keys, args
	}
	keys, args := s.args(c, now, c.Op.Mode)
	return s.script, keys, args
}

// fixedOnly reports whether hot_fixed.lua can decide c.
func (s *Store) fixedOnly(c *Call) bool {
	if c.Op.Mode > tiers.Report {
		return false
	}
	ok := true
	c.Each(func(i int) { ok = ok && c.Op.Cells[i].Algorithm == rules.FixedWindow })
	return ok && len(c.Op.Cells) > 0
}

// size is the number of c's cells.
func (c *Call) size() int {
	if c.cells != nil {
		return len(c.cells)
	}
	return len(c.Op.Cells)
}

// fixedCall is the keys and arguments of one hot_fixed.lua call (see its
// header), built a check at a time.
type fixedCall struct {
	keys, headers []string
	args          []any
}

// newFixedCall starts a hot_fixed.lua call of about checks checks of
// cells cells each.
func (s *Store) newFixedCall(checks, cells int) *fixedCall {
	f := &fixedCall{args: make([]any, 1, 1+checks*(3+5*cells))}
	f.args[0] = boolInt(s.dir != nil)
	if s.dir != nil {
		// The headers are appended to the keys at the end: room for both.
		f.keys = make([]string, 0, 2*checks*cells)
		f.headers = make([]string, 0, checks*cells)
	} else {
		f.keys = make([]string, 0, checks*cells)
	}
	return f
}

// addFixed appends c's check to f.
func (s *Store) addFixed(f *fixedCall, c *Call, now time.Time) {
	f.args = append(f.args, c.Op.Cost, int(c.Op.Mode), c.size())
	ms := now.UnixMilli()
	c.Each(func(i int) {
		cell := &c.Op.Cells[i]
		f.keys = append(f.keys, s.Key(cell))
		ttl := untilWindowEnd(ms, cell.Window.Milliseconds()) + s.ttlJitter()
		field, notCold := "", ""
		if s.dir != nil {
			f.headers = append(f.headers, s.dir.TagHeaderKey(cell.Tag))
			field, notCold = s.dir.Field(cell.CellID()), c.Op.NotColdAt(i)
		}
		f.args = append(f.args, cell.Limit, ttl, boolInt(cell.Shadow), field, notCold)
	})
}

// request returns the call's keys (every check's cells, then their
// headers in the same order) and arguments.
func (f *fixedCall) request() ([]string, []any) {
	return append(f.keys, f.headers...), f.args
}

// ttlJitter is a random extra TTL in milliseconds for a new key: between
// min(Jitter, skewGrace) and Jitter. The floor is for clocks that disagree:
// a key's TTL is reckoned on the clock of the instance that made it, and
// an instance whose clock is behind still decides in that window for as
// long as the skew; without the floor a key could expire under it and its
// window start again from 0 (make test-partitions, TestClockSkew_…).
func (s *Store) ttlJitter() int64 {
	if s.jitter <= 0 {
		return 0
	}
	j, floor := s.jitter.Milliseconds(), min(s.jitter, skewGrace).Milliseconds()
	return floor + rand.Int64N(j-floor+1)
}

// skewGrace is how far behind another instance's clock may be and still
// find the keys that instance made (with QUOTA_TTL_JITTER at least that).
const skewGrace = 5 * time.Second

// boolInt is 1 for true, 0 for false (the scripts' flags).
func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// untilWindowEnd is the time in ms from ms to the end of its fixed window
// of w ms: hot_check.lua's reset = window - now % window, with Lua's
// floored % (now may be before the epoch in tests).
func untilWindowEnd(ms, w int64) int64 {
	m := ms % w
	if m < 0 {
		m += w
	}
	return w - m
}

// decodeFixed turns hot_fixed.lua's reply into outcomes with the integer
// semantics of hot_check.lua's fixed_window: a cell allows when its count
// plus the cost fits its limit; remaining is after the call when it was (or,
// in a dry run, would have been) counted, else now; reset is the end of the
// window; retry is the reset of a cell that denies. A cell the directory
// places elsewhere gets its route, as decode gives it. The reply is walked
// twice: whether every cell allows decides what each one reports.
//
// vals is the reply of c's script call from c's first value on (the call
// may have decided other checks before c); decodeFixed returns how many
// values are c's.
func (s *Store) decodeFixed(c *Call, now time.Time, vals []any) (int, error) {
	op := c.Op
	all := true
	j, err := walkFixedReply(c, vals, func(i int, used int64, rt *tiers.Route) {
		if rt != nil {
			if op.Route == nil {
				op.Route = make([]tiers.Route, len(op.Cells))
			}
			op.Route[i] = *rt
			return
		}
		if cell := &op.Cells[i]; used+op.Cost > cell.Limit && !cell.Shadow {
			all = false
		}
	})
	if err != nil {
		return 0, err
	}
	commit, ok := replyInt(vals, j)
	if !ok || commit < 0 || commit > 1 {
		return 0, fmt.Errorf("hot check: reply of %d values, want the decision at %d", len(vals), j)
	}
	c.counted = commit == 1
	post := commit == 1 || (op.Mode == tiers.DryRun && all)
	ms := now.UnixMilli()
	_, _ = walkFixedReply(c, vals, func(i int, used int64, rt *tiers.Route) {
		if rt != nil {
			op.Out[i] = tiers.Outcome{}
			return
		}
		op.Out[i] = fixedOutcome(&op.Cells[i], used, op.Cost, ms, post)
	})
	return j + 1, nil
}

// fixedOutcome is a fixed-window cell's answer at ms (Unix ms) to a call
// of cost, from its count before the call; post: the cost was (or, in a
// dry run, would have been) counted, so remaining is after it.
func fixedOutcome(cell *tiers.Cell, used, cost, ms int64, post bool) tiers.Outcome {
	allowed := used+cost <= cell.Limit
	if post {
		used += cost
	}
	reset := untilWindowEnd(ms, cell.Window.Milliseconds())
	return outcome(allowed, cell.Limit-used, reset, reset)
}

// walkFixedReply calls fn for each of c's cells, in order, with its value
// in hot_fixed.lua's reply: the count (rt nil) or, for a cell the
// directory places elsewhere, its route. It returns the index of the
// reply's last value (the decision).
func walkFixedReply(c *Call, vals []any, fn func(i int, used int64, rt *tiers.Route)) (int, error) {
	j := 0
	var bad error
	c.Each(func(i int) {
		if bad != nil {
			return
		}
		v, ok := replyInt(vals, j)
		if !ok {
			bad = fmt.Errorf("hot check: reply %v has no count at %d", vals, j)
			return
		}
		j++
		if v >= 0 {
			fn(i, v, nil)
			return
		}
		rt := tiers.Route{Where: int8(-v)}
		if v == -1 || v == -4 {
			// The warm record, or the cold filter's version.
			if rt.Raw, ok = replyString(vals, j); !ok {
				bad = fmt.Errorf("hot check: reply %v has no string after %d at %d", vals, v, j)
				return
			}
			j++
		}
		fn(i, 0, &rt)
	})
	return j, bad
}

// replyString is the string at vals[i], if there is one.
func replyString(vals []any, i int) (string, bool) {
	if i >= len(vals) {
		return "", false
	}
	v, ok := vals[i].(string)
	return v, ok
}

// replyInt is the integer at vals[i], if there is one.
func replyInt(vals []any, i int) (int64, bool) {
	if i >= len(vals) {
		return 0, false
	}
	v, ok := vals[i].(int64)
	return v, ok
}

// fixedPerCall is how many checks one hot_fixed.lua call decides at most:
// enough that a script call's own cost is spread thin, few enough that one
// call holds Redis for no longer than a few of a pipeline's commands would.
const fixedPerCall = 32

// runPipelined sends every call by EVALSHA in one pipeline, behind an
// MGET of peekKeys when there are any (returned; nil otherwise); if Redis
// lost the script (restart, SCRIPT FLUSH) it loads it and sends the
// refused calls once more.
//
// Consecutive calls that hot_fixed.lua decides go in one script call, up
// to fixedPerCall of them: they share one cmd, whose reply decodeAll
// hands out in order. It is used on a single Redis only (on a Redis
// Cluster the checks of one script call would have to share a slot).
func (s *Store) runPipelined(ctx context.Context, now time.Time, calls []Call, retry bool, peekKeys []string) (*redis.SliceCmd, error) {
	pipe := s.rdb.Pipeline()
	var mget *redis.SliceCmd
	if len(peekKeys) > 0 {
		mget = pipe.MGet(ctx, peekKeys...)
	}
	for i := 0; i < len(calls); {
		c := &calls[i]
		if c.fixed = s.fixedOnly(c); !c.fixed {
			keys, args := s.args(c, now, c.Op.Mode)
			c.cmd = s.script.EvalSha(ctx, pipe, keys, args...)
			i++
			continue
		}
		end := i + 1
		for end < len(calls) && end-i < fixedPerCall && s.fixedOnly(&calls[end]) {
			end++
		}
		f := s.newFixedCall(end-i, c.size())
		for j := i; j < end; j++ {
			calls[j].fixed = true
			s.addFixed(f, &calls[j], now)
		}
		keys, args := f.request()
		cmd := s.fixed.EvalSha(ctx, pipe, keys, args...)
		for j := i; j < end; j++ {
			calls[j].cmd = cmd
		}
		i = end
	}
	if _, err := pipe.Exec(ctx); err == nil || !retry {
		return mget, nil // per-command errors are read in decode
	}
	// Only the calls refused for want of a script are sent again: the
	// others ran (on a cluster a restarted or newly promoted master lacks
	// the scripts the other masters have) and must not count twice.
	var again []Call
	var at []int
	for i := range calls {
		if redisscript.IsNoScript(calls[i].cmd.Err()) {
			again, at = append(again, calls[i]), append(at, i)
		}
	}
	if len(again) == 0 {
		return mget, nil
	}
	if err := s.Load(ctx); err != nil {
		return nil, err
	}
	if _, err := s.runPipelined(ctx, now, again, false, nil); err != nil {
		return nil, err
	}
	for j, i := range at {
		calls[i].cmd = again[j].cmd
	}
	return mget, nil
}

// replyInts converts a script reply to integers; a string in it (a warm
// record of a directory answer) is returned in raws at its index.
func replyInts(cmd *redis.Cmd) ([]int64, map[int]string, error) {
	vals, err := cmd.Slice()
	if err != nil {
		return nil, nil, err
	}
	out := make([]int64, len(vals))
	var raws map[int]string
	for i, v := range vals {
		switch x := v.(type) {
		case int64:
			out[i] = x
		case string:
			if raws == nil {
				raws = map[int]string{}
			}
			raws[i] = x
		default:
			return nil, nil, fmt.Errorf("unexpected reply value %T", v)
		}
	}
	return out, raws, nil
}

// committed reports whether the script call counted its (hot) cells (set
// when the reply was decoded).
func (c *Call) Committed() bool { return c.counted }

func (s *Store) decode(c *Call) error {
	res, raws, err := replyInts(c.cmd)
	if err != nil {
		return fmt.Errorf("hot check: %w", tiers.WrapUnavailable(err))
	}
	c.counted = len(res) > 0 && res[len(res)-1] == 1
	j := 0
	var bad error
	c.Each(func(i int) {
		if bad != nil {
			return
		}
		if len(res) < 4*j+4 {
			bad = fmt.Errorf("hot check: short reply (%d values)", len(res))
			return
		}
		r := res[4*j : 4*j+4]
		if r[0] < 0 {
			// Directory answer: the cell lives elsewhere.
			if c.Op.Route == nil {
				c.Op.Route = make([]tiers.Route, len(c.Op.Cells))
			}
			c.Op.Route[i] = tiers.Route{Where: int8(-r[0]), Raw: raws[4*j+1]}
			c.Op.Out[i] = tiers.Outcome{}
			j++
			return
		}
		c.Op.Out[i] = tiers.Outcome{
			Allowed:    r[0] == 1,
			Remaining:  r[1],
			ResetAfter: time.Duration(r[2]) * time.Millisecond,
			RetryAfter: time.Duration(r[3]) * time.Millisecond,
			Tier:       tiers.Hot,
		}
		j++
	})
	return bad
}

// partsToRefund returns the parts of a split op that counted although the op
// as a whole was denied.
func (s *Store) partsToRefund(op *tiers.Op, calls []Call) []Call {
	var out []Call
	for i := range calls {
		c := &calls[i]
		if c.Op != op || c.cells == nil {
			continue
		}
		if c.Committed() {
			out = append(out, Call{Op: op, cells: c.cells})
		}
	}
	return out
}

// refund gives back what the parts in calls counted. The script answers each
// refunded cell's state after the refund, which becomes the cell's
// remaining, reset and retry: the op counted nothing, so they describe the
// state now, as for any denied check. Each cell keeps its decision.
func (s *Store) refund(ctx context.Context, now time.Time, calls []Call) error {
	defer s.NotifyRefund()
	each := make([]redisscript.Call, len(calls))
	for i := range calls {
		each[i].Keys, each[i].Args = s.args(&calls[i], now, tiers.Refund)
	}
	cmds, err := redisscript.RunEach(ctx, s.rdb, s.script, each)
	if err != nil {
		return fmt.Errorf("hot refund: %w", tiers.WrapUnavailable(err))
	}
	for i := range calls {
		calls[i].cmd = cmds[i]
		if err := cmds[i].Err(); err != nil {
			return fmt.Errorf("hot refund: %w", tiers.WrapUnavailable(err))
		}
	}
	for i := range calls {
		c := &calls[i]
		allowed := make([]bool, 0, len(c.cells))
		c.Each(func(j int) { allowed = append(allowed, c.Op.Out[j].Allowed) })
		if err := s.decode(c); err != nil {
			return fmt.Errorf("hot refund: %w", err)
		}
		k := 0
		c.Each(func(j int) {
			o := &c.Op.Out[j]
			o.Allowed = allowed[k]
			if o.Allowed {
				o.RetryAfter = 0
			}
			k++
		})
	}
	return nil
}

// Ping reports whether Redis answers. A pooled connection that Redis
// closed after its last reply (an idle timeout; an unauthenticated
// client's oversized request, such as loading a script) fails the first
// ping with EOF when the close is still on its way: one more ping, on a
// new connection, says whether Redis itself answers, and with what error.
func (s *Store) Ping(ctx context.Context) error {
	err := s.rdb.Ping(ctx).Err()
	if connectionLost(err) {
		err = s.rdb.Ping(ctx).Err()
	}
	if err != nil {
		return fmt.Errorf("redis ping: %w", err)
	}
	return nil
}

// connectionLost reports whether err is the connection ending under a
// command (not an error Redis answered, nor a timeout).
func connectionLost(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// outcome is a cell's answer from its script reply values (ms); retry is
// 0 when the cell allows.
func outcome(allowed bool, rem, reset, retry int64) tiers.Outcome {
	if allowed {
		retry = 0
	}
	return tiers.Outcome{
		Allowed:    allowed,
		Remaining:  max(rem, 0),
		ResetAfter: time.Duration(reset) * time.Millisecond,
		RetryAfter: time.Duration(retry) * time.Millisecond,
		Tier:       tiers.Hot,
	}
}
