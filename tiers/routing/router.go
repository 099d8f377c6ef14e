package routing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/cold"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/warm"
)

// Router is the Store the service checks against when tiering is on: it
// decides every op over the hot, warm and cold tiers, wherever each cell
// lives.
//
// Every op goes first through the hot script, which carries, for each
// fixed-window cell, its tag's directory (tiers/warm/directory.go): its warm field
// and its tag's cold filter (tiers/warm/coldfilter.go). A cell whose hot key
// exists is counted there with no lookup, and so is one with no field that
// the filter says is not cold: a new cell, or a hot one whose key expired.
// The script reports the others as warm (with the record), moving, or
// "may be cold" (with the filter's version): the router looks the cold row
// up, and sends the op again, with the version, for a cell that has none
// (a false positive), which the script then counts as new if no cell of
// its tag went cold meanwhile. The hot cells are decided and counted as a
// part of their own. The warm and cold parts are then decided by those
// stores (with Op.MustExist: a record that vanished since the lookup has
// moved). The op is allowed only if every part allowed; the parts that
// counted are refunded (same now, the refund itself routed) when another
// part denied or failed - the rule the hot store applies to a check split
// over hash slots. A cell that is moving (or a part that fails with
// ErrMoved) gives back what the op counted and sends the whole op again
// after a short backoff, for at most MovedWait.
//
// Ops with every cell hot or new cost one round trip, as with the hot
// store alone, and no MySQL statement. An op with warm cells costs two.
// Cold cells cost a row lookup and a MySQL transaction per shard, shared
// by the ops of a batch (group commit, router_group.go): a batch of N cold
// checks costs one lookup and one transaction per shard, not N; with
// ColdHints, a cell found cold before skips the lookup. The directory is
// the truth: the hints are only a guess at where to look, which the cold
// part's MustExist checks.
type Router struct {
	hot  *hot.Store
	warm *warm.Store
	cold *cold.Store
	// Observe, when set, is called after each op with the cells found
	// in warm or cold and their records as the hot script saw them (warm)
	// or as the check left them (cold): the on-call migration's input. It
	// must not block.
	Observe func(tier tiers.Tier, ref tiers.Ref, rec *tiers.Record)
	// ColdHints, when set, lets a cell found cold before skip the cold-row
	// lookup (coldhints.go); nil: every cold check looks its row up.
	ColdHints *ColdHints
	// Calls, when set, is called once per op with its fixed-window cells
	// whose window is at least CallsMinWindow (the scheduled migration's
	// activity count); an op with none costs nothing. Bit i of created
	// (i < 64) says the op's call created cell i's hot key: its count was
	// 0 before, so it is likely the cell's first call (a hint: a key
	// expired or counted down to 0 says the same). It must not block, nor
	// keep cells after it returns.
	Calls          func(cells []tiers.Cell, created uint64)
	CallsMinWindow time.Duration
	// MovedWait bounds how long an op waits for cells frozen by a move
	// before it fails with ErrUnavailable (and the fail mode answers). A
	// move freezes a batch for milliseconds; a crashed mover's cells stay
	// frozen until its lease lapses and a Repair finishes the move (~10 s),
	// and a caller held that long would hold its connection and in-flight
	// slot. 0: 2 s.
	MovedWait time.Duration
}

func (r *Router) movedWait() time.Duration {
	if r.MovedWait > 0 {
		return r.MovedWait
	}
	return 2 * time.Second
}

// NewRouter returns a router over the three stores (cold may be nil: then a
// cell found cold is an error). The hot store's options are kept.
func NewRouter(hot *hot.Store, warm *warm.Store, cold *cold.Store) *Router {
	return &Router{hot: hot.WithDirectory(warm), warm: warm, cold: cold}
}

// Tier returns Hot: the router answers for the service's default tier.
func (r *Router) Tier() tiers.Tier { return tiers.Hot }

// Hot returns the router's hot store (it carries the directory).
func (r *Router) Hot() *hot.Store { return r.hot }

// PeekFixed reads denied ops' fixed-window cells where the hot script
// would (tiers.FixedPeeker): a cell whose hot key exists is hot, whatever
// the directory says of its tag, and one without is left for a check.
func (r *Router) PeekFixed(ctx context.Context, now time.Time, peeks []tiers.FixedPeek) error {
	return r.hot.PeekFixed(ctx, now, peeks)
}

// Check decides ops in order, one hot-script pipeline for the batch, then
// the warm and cold parts of the ops that have any: the cold parts of a
// run of ops without warm cells together (finishRun), the others op by op.
// Every op is finished, even after another failed; Check returns the first
// error (CheckEach).
func (r *Router) Check(ctx context.Context, now time.Time, ops []*tiers.Op) error {
	return r.CheckEach(ctx, now, ops, func(int, error) {})
}

// CheckEach is Check reporting each op to done as soon as it is decided
// (EachChecker): after the hot pipeline, first every op the hot script
// decided alone (all its cells hot), then the others as Check finishes
// them. An op whose hot-script call failed gets that call's error (on a
// Redis Cluster, only the ops with keys on the failed master); if the
// pipeline could not be sent at all, every op gets its error.
//
// Answering an all-hot op before the warm and cold parts of the ops sent
// before it keeps each op decided as if sent alone, in order: what it
// answers was fixed by the hot script, which ran every op's hot part in
// order before any warm or cold part (router_group.go). What is left of it
// (Calls; for a denied op split over hash slots, the refund of the slots
// that counted) changes no other op's answer: no warm or cold part reads a
// hot cell, and an op sent again later (a cell moving or new) only finds
// earlier that the denied op counted nothing, as when each is sent alone.
// Finishing it earlier changes when its caller hears the answer, not the
// answer.
func (r *Router) CheckEach(ctx context.Context, now time.Time, ops []*tiers.Op, done func(i int, err error)) error {
	_, err := r.CheckEachPeeking(ctx, now, nil, ops, done)
	return err
}

// CheckEachPeeking is CheckEach with peeks read before any op counts
// (tiers.PeekingChecker), in the hot pipeline on a single Redis
// (hot.Store.RunEachPeeking): a peek reads where PeekFixed would.
func (r *Router) CheckEachPeeking(ctx context.Context, now time.Time, peeks []tiers.FixedPeek, ops []*tiers.Op, done func(i int, err error)) (readErr, err error) {
	for _, op := range ops {
		op.Route = nil
		op.ResetOut()
	}
	calls := r.hot.Plan(ops)
	if readErr, err = r.hot.RunEachPeeking(ctx, now, peeks, calls); err != nil {
		for i := range ops {
			done(i, err)
		}
		return readErr, err
	}
	byOp := hot.CallsByOp(calls, len(ops))
	var first error
	report := func(i int, err error) {
		first = cmp.Or(first, err)
		done(i, err)
	}
	var rest []int // the ops with a cell outside hot, in order
	for i, op := range ops {
		if err := callsErr(byOp[i]); err != nil {
			// A call of op failed (on a cluster: its master is down); the
			// other ops of the batch are not affected. What op's other
			// calls counted is given back.
			report(i, r.undo(ctx, now, op, hotCounted(op, byOp[i]), err))
			continue
		}
		if op.Route != nil {
			rest = append(rest, i)
			continue
		}
		report(i, r.finishOne(ctx, now, op, byOp[i]))
	}
	if len(rest) > 0 {
		tiers.SlowPart(ctx)
	}
	for k := 0; k < len(rest); {
		k += r.finishRun(ctx, now, ops, rest[k:], byOp, report)
	}
	return readErr, first
}

// callsErr is the first error of calls.
func callsErr(calls []hot.Call) error {
	for i := range calls {
		if calls[i].Err != nil {
			return calls[i].Err
		}
	}
	return nil
}

// finishOne finishes op alone.
func (r *Router) finishOne(ctx context.Context, now time.Time, op *tiers.Op, calls []hot.Call) error {
	return r.settle(ctx, now, op, r.finish(ctx, now, op, calls))
}

// errNotCold ends an attempt that found cells the cold filter placed in
// doubt to have no cold row: the op is sent again at once (no backoff).
var errNotCold = fmt.Errorf("router: cells not cold after all: %w", tiers.ErrMoved)

// settle ends op's first attempt, which ended with err: an op that found a
// cell moving (or not cold after all) is sent again alone (checkOp), and a
// decided op is reported to Calls.
func (r *Router) settle(ctx context.Context, now time.Time, op *tiers.Op, err error) error {
	if errors.Is(err, tiers.ErrMoved) {
		attempt := 2
		if errors.Is(err, errNotCold) {
			attempt = 1
		}
		err = r.checkOp(ctx, now, op, attempt)
	}
	if err == nil {
		r.called(op)
	}
	return err
}

// called reports op's fixed-window cells of long enough windows to Calls:
// op's own cells when all of them are (no copy), else a copy of those,
// with the created bits of the cells kept.
func (r *Router) called(op *tiers.Op) {
	if r.Calls == nil || op.Mode == tiers.Refund {
		return
	}
	uncounted := func(c tiers.Cell) bool {
		return c.Algorithm != rules.FixedWindow || c.Window < r.CallsMinWindow
	}
	created := createdKeys(op)
	if !slices.ContainsFunc(op.Cells, uncounted) {
		r.Calls(op.Cells, created)
		return
	}
	var cells []tiers.Cell
	var bits uint64
	for i, c := range op.Cells {
		if uncounted(c) {
			continue
		}
		if i < 64 && created&(1<<i) != 0 && len(cells) < 64 {
			bits |= 1 << len(cells)
		}
		cells = append(cells, c)
	}
	if len(cells) > 0 {
		r.Calls(cells, bits)
	}
}

// createdKeys returns the bits of op's first 64 cells whose hot key op's
// call created: op counted, the cell is hot, and its remaining is its
// limit less op's cost, so its count was 0 before.
func createdKeys(op *tiers.Op) uint64 {
	if !op.Committed {
		return 0
	}
	var bits uint64
	for i := 0; i < len(op.Cells) && i < 64; i++ {
		hot := op.Route == nil || op.Route[i].Where == tiers.RouteHot
		if hot && op.Out[i].Remaining == op.Cells[i].Limit-op.Cost {
			bits |= 1 << i
		}
	}
	return bits
}

// checkOp sends op alone, again until no part finds a cell moving or
// MovedWait has passed.
func (r *Router) checkOp(ctx context.Context, now time.Time, op *tiers.Op, attempt int) error {
	start := time.Now()
	for ; ; attempt++ {
		if time.Since(start) > r.movedWait() {
			return fmt.Errorf("router: %w: %w (%d attempts in %s)", tiers.ErrUnavailable, tiers.ErrMoved, attempt-1, time.Since(start).Round(time.Millisecond))
		}
		if attempt > 1 {
			if err := routerBackoff(ctx, attempt); err != nil {
				return fmt.Errorf("router: %w", err)
			}
		}
		op.Route = nil
		op.ResetOut()
		calls := r.hot.Plan([]*tiers.Op{op})
		if err := r.hot.Run(ctx, now, calls); err != nil {
			return err
		}
		err := r.finish(ctx, now, op, calls)
		if !errors.Is(err, tiers.ErrMoved) {
			return err
		}
	}
}

// routerBackoff waits for a move's frozen moment to pass: jittered, from
// 0.5 ms doubling to 20 ms.
func routerBackoff(ctx context.Context, attempt int) error {
	d := min(500*time.Microsecond<<min(attempt-2, 6), 20*time.Millisecond)
	return clock.Sleep(ctx, d/2+time.Duration(int64(d)/2*int64(attempt%7)/7))
}

// finish completes op after its hot-script calls: decides its warm and cold
// parts, sets Committed and refunds what counted when the op is denied.
// It returns an error wrapping ErrMoved when the op must be sent again
// (having then given back everything it counted).
func (r *Router) finish(ctx context.Context, now time.Time, op *tiers.Op, calls []hot.Call) error {
	counted := hotCounted(op, calls)
	if op.Route != nil {
		if err := r.decideParts(ctx, now, op, &counted); err != nil {
			return r.undo(ctx, now, op, counted, err)
		}
	}
	return r.conclude(ctx, now, op, counted)
}

// hotCounted returns the indexes of op's hot cells whose part counted.
func hotCounted(op *tiers.Op, calls []hot.Call) []int {
	var counted []int
	for i := range calls {
		c := &calls[i]
		if !c.Committed() {
			continue
		}
		c.Each(func(j int) {
			if op.Route == nil || op.Route[j].Where == tiers.RouteHot {
				counted = append(counted, j)
			}
		})
	}
	return counted
}

// undo gives back what op counted (the cells at counted) after cause and
// returns cause, or the refund's failure.
func (r *Router) undo(ctx context.Context, now time.Time, op *tiers.Op, counted []int, cause error) error {
	if len(counted) == 0 || op.Mode == tiers.Refund {
		return cause
	}
	if err := r.refundCells(ctx, now, op, counted); err != nil {
		return refundFailed{fmt.Errorf("router: %v; refund failed, counts %d too high: %w", cause, op.Cost, err)}
	}
	return cause
}

// refundFailed is the error of an op whose refund failed. It is never
// ErrMoved, even when the refund failed on a cell that stayed frozen past
// MovedWait (whose error is): an op whose count could not be given back
// must not be sent again, or it would count twice. It is everything else
// its cause is (ErrUnavailable, so the fail mode answers; ErrColdUnavailable,
// which the breaker does not count).
type refundFailed struct{ err error }

func (e refundFailed) Error() string { return e.err.Error() }

func (e refundFailed) Is(target error) bool {
	return !errors.Is(target, tiers.ErrMoved) && errors.Is(e.err, target)
}

// decideParts decides op's warm and cold parts, adding the cells that
// counted to counted.
func (r *Router) decideParts(ctx context.Context, now time.Time, op *tiers.Op, counted *[]int) error {
	var warmIdx, coldIdx, unknownIdx []int
	for i, rt := range op.Route {
		switch rt.Where {
		case tiers.RouteWarm:
			warmIdx = append(warmIdx, i)
		case tiers.RouteUnknown:
			if r.hinted(&op.Cells[i]) {
				coldIdx = append(coldIdx, i)
			} else {
				unknownIdx = append(unknownIdx, i)
			}
		case tiers.RouteMoving:
			return fmt.Errorf("router: %w", tiers.ErrMoved)
		}
	}
	if len(unknownIdx) > 0 {
		// The cold filter says they may be cold: they are if the
		// cold tier has their row.
		notCold, err := r.sortUnknown(ctx, op, unknownIdx, &coldIdx)
		if err != nil {
			return err
		}
		if notCold {
			return errNotCold
		}
	}
	for _, part := range r.warmParts(op, warmIdx) {
		if err := r.decidePart(ctx, now, op, part, r.warm, tiers.Warm, counted); err != nil {
			return err
		}
	}
	if len(coldIdx) > 0 {
		if r.cold == nil {
			return errors.New("router: a cell is cold but no cold store is configured")
		}
		return r.decidePart(ctx, now, op, coldIdx, r.cold, tiers.Cold, counted)
	}
	return nil
}

// warmParts cuts op's warm cells at idx into the parts the warm tier
// decides at once: all of them on a single Redis; on a Redis Cluster one
// part a tag, since one compare-and-set reaches one hash slot (an Envoy
// request's descriptors with and without the app key, say, have two). The
// parts then count one after the other and an op denied by a later one
// gives back what the earlier ones counted, as its parts in different
// tiers do.
func (r *Router) warmParts(op *tiers.Op, idx []int) [][]int {
	if len(idx) == 0 {
		return nil
	}
	if !r.warm.Cluster() {
		return [][]int{idx}
	}
	var parts [][]int
	at := map[tiers.Tag]int{}
	for _, i := range idx {
		t := op.Cells[i].Tag
		k, ok := at[t]
		if !ok {
			k = len(parts)
			at[t] = k
			parts = append(parts, nil)
		}
		parts[k] = append(parts[k], i)
	}
	return parts
}

// decidePart sends op's cells at idx to store as one op.
func (r *Router) decidePart(ctx context.Context, now time.Time, op *tiers.Op, idx []int, store tiers.Store, tier tiers.Tier, counted *[]int) error {
	sub := r.partOp(op, idx, tier)
	if err := store.Check(ctx, now, []*tiers.Op{sub}); err != nil {
		if tier == tiers.Cold {
			r.forgetHints(op, idx, err)
		}
		return err
	}
	*counted = r.applyPart(op, idx, sub, tier, *counted)
	return nil
}

// partOp is the op a tier decides for op's cells at idx: the directory
// said they are there, so they must exist. A cold part returns its records
// when Observe wants them.
func (r *Router) partOp(op *tiers.Op, idx []int, tier tiers.Tier) *tiers.Op {
	sub := &tiers.Op{Cost: op.Cost, Mode: op.Mode, MustExist: true, Cells: pick(op.Cells, idx)}
	if tier == tiers.Cold && r.Observe != nil {
		sub.Records = make([]tiers.Record, len(idx))
	}
	return sub
}

// applyPart copies a decided part's outcomes into op, reports its cells to
// Observe, and returns counted with idx added when the part counted.
func (r *Router) applyPart(op *tiers.Op, idx []int, sub *tiers.Op, tier tiers.Tier, counted []int) []int {
	for k, i := range idx {
		op.Out[i] = sub.Out[k]
	}
	if sub.Committed {
		counted = append(counted, idx...)
	}
	if r.Observe != nil {
		for k, i := range idx {
			ref := tiers.RefOf(&op.Cells[i])
			var rec *tiers.Record
			switch {
			case tier == tiers.Warm:
				if rv, ok := warm.IsRecord(op.Route[i].Raw); ok {
					rec = &rv
				}
			case tier == tiers.Cold && len(sub.Records) == len(idx):
				rec = &sub.Records[k]
			}
			r.Observe(tier, ref, rec)
		}
	}
	return counted
}

// conclude sets op.Committed once every part is decided and refunds what
// counted when the op is denied.
func (r *Router) conclude(ctx context.Context, now time.Time, op *tiers.Op, counted []int) error {
	if op.Mode == tiers.Refund {
		op.Committed = false
		return nil
	}
	allowed := op.Allowed()
	op.Committed = op.Mode != tiers.DryRun && allowed
	if op.Mode == tiers.Enforce && !allowed && len(counted) > 0 {
		if err := r.refundCells(ctx, now, op, counted); err != nil {
			return fmt.Errorf("router refund: %w", err)
		}
	}
	return nil
}

// sortUnknown adds the cells at idx that have a cold row to coldIdx and
// marks the others not cold at the filter version the script reported (a
// false positive of the filter, or a cell moved out of cold): it reports
// whether it marked any (the op is then sent again, and the script counts
// those cells as new unless the filter changed meanwhile).
func (r *Router) sortUnknown(ctx context.Context, op *tiers.Op, idx []int, coldIdx *[]int) (bool, error) {
	refs := make([]tiers.Ref, len(idx))
	for k, i := range idx {
		refs[k] = tiers.RefOf(&op.Cells[i])
	}
	exists := make([]bool, len(idx))
	if r.cold != nil {
		var err error
		if exists, err = r.cold.Exists(ctx, refs); err != nil {
			return false, err
		}
	}
	marked := false
	for k, i := range idx {
		if exists[k] {
			*coldIdx = append(*coldIdx, i)
			r.hint(refs[k])
			continue
		}
		if op.NotCold == nil {
			op.NotCold = make([]string, len(op.Cells))
		}
		op.NotCold[i] = op.Route[i].Raw
		marked = true
	}
	return marked, nil
}

// hinted reports whether c is hinted cold. Without hints no cell id (a
// hash) is computed.
func (r *Router) hinted(c *tiers.Cell) bool {
	return r.ColdHints != nil && r.ColdHints.Has(tiers.RefOf(c).ID())
}

// hint remembers refs as cold.
func (r *Router) hint(refs ...tiers.Ref) {
	if r.ColdHints == nil {
		return
	}
	for i := range refs {
		r.ColdHints.Add(refs[i].ID())
	}
}

// forgetHints drops the cold hints of op's cells at idx when their cold
// part failed with ErrMoved (a row missing: the cell moved away or was
// never cold), so that the op, sent again, looks the rows up.
func (r *Router) forgetHints(op *tiers.Op, idx []int, err error) {
	if r.ColdHints == nil || !errors.Is(err, tiers.ErrMoved) {
		return
	}
	for _, i := range idx {
		r.ColdHints.Forget(tiers.RefOf(&op.Cells[i]).ID())
	}
}

// refundCells gives back op's cost in the cells at idx, routed like any op
// (a cell may have moved since it counted: its count moved with it). The
// cells' outcomes then describe the state after the refund; each keeps its
// decision. Each cell is refunded by an op of its own: a refund op is sent
// again while it finds a cell moving, and one that had already been applied
// to some cells when it found another moving would apply to them again on
// every attempt, and the cell would then admit more than its limit
// (TestRouter_RefundRetriedOverAFrozenCellRefundsTheOthersOnce).
func (r *Router) refundCells(ctx context.Context, now time.Time, op *tiers.Op, idx []int) error {
	ctx = context.WithoutCancel(ctx)
	defer r.hot.NotifyRefund()
	var errs []error
	for _, i := range idx {
		rop := &tiers.Op{Cost: op.Cost, Mode: tiers.Refund, Cells: pick(op.Cells, []int{i})}
		if err := r.checkOp(ctx, now, rop, 1); err != nil {
			errs = append(errs, err)
			continue
		}
		o := rop.Out[0]
		o.Allowed = op.Out[i].Allowed
		if o.Allowed {
			o.RetryAfter = 0
		}
		op.Out[i] = o
	}
	return errors.Join(errs...)
}

func pick(cells []tiers.Cell, idx []int) []tiers.Cell {
	out := make([]tiers.Cell, len(idx))
	for k, i := range idx {
		out[k] = cells[i]
	}
	return out
}
