package routing

import (
	"context"
	"time"

	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/hot"
)

// Group commit of a batch's cold parts. The hot script has decided the hot
// parts of every op of the batch; a run of consecutive ops with no warm or
// moving cell then costs one cold-row lookup per shard for all of them and
// one ColdStore group (one transaction per shard), instead of one lookup
// and one transaction per shard for each op. Each op is still decided as
// if sent alone, in order: the cold tier decides the run's parts in order
// on the same rows, and nothing else of a later op depends on an earlier
// op's cold part (hot parts are decided before any cold part, as without
// groups, and an op in a run has no warm part). Ops that would break that
// go alone, as before: an op with a warm or moving cell, one with a cell
// never seen before (it is placed, then sent again), and an Enforce op
// whose hot part already denied (its cold part counts and is refunded, so
// a later op of the run could see that count). Ops with every cell hot
// are not in runs: they are finished, and answered, before any run
// (Router.CheckEach says why that keeps the order); so a run is the
// consecutive ops with a cell outside hot, all-hot ops between them left
// out.

// finishRun finishes ops[idx[0]] alone, or the run of ops from there
// (ops at idx, in order) whose cold parts can be decided together,
// reports each op it finished (report(i, err), i its index in ops) as soon
// as it is, and returns how many of idx it finished.
func (r *Router) finishRun(ctx context.Context, now time.Time, ops []*tiers.Op, idx []int, byOp [][]hot.Call, report func(i int, err error)) int {
	n := 0
	for n < len(idx) && groupable(ops[idx[n]]) {
		n++
	}
	if n < 2 {
		report(idx[0], r.finishOne(ctx, now, ops[idx[0]], byOp[idx[0]]))
		return 1
	}
	return r.finishGroup(ctx, now, ops, idx[:n], byOp, report)
}

// groupable reports whether op can be finished in a group: no cell of it
// is warm or moving, and it is not an Enforce op with cells outside hot
// whose hot part denied.
func groupable(op *tiers.Op) bool {
	if op.Route == nil {
		return true
	}
	outside := false
	for _, rt := range op.Route {
		switch rt.Where {
		case tiers.RouteWarm, tiers.RouteMoving:
			return false
		case tiers.RouteUnknown:
			outside = true
		}
	}
	return !outside || op.Mode != tiers.Enforce || !hotDenied(op)
}

// hotDenied reports whether a non-shadow hot cell of op denied.
func hotDenied(op *tiers.Op) bool {
	for j := range op.Cells {
		hot := op.Route == nil || op.Route[j].Where == tiers.RouteHot
		if hot && !op.Out[j].Allowed && !op.Cells[j].Shadow {
			return true
		}
	}
	return false
}

// finishGroup finishes a run of groupable ops (ops at idx), up to the
// first that has a cell never seen before (that one goes alone next),
// reports each as it is finished, and returns how many it finished. An op
// that fails gives back what it counted and gets its own error; the others
// get their decisions.
func (r *Router) finishGroup(ctx context.Context, now time.Time, ops []*tiers.Op, idx []int, byOp [][]hot.Call, report func(i int, err error)) int {
	group := make([]*tiers.Op, len(idx))
	counted := make([][]int, len(idx))
	for k, i := range idx {
		group[k] = ops[i]
		counted[k] = hotCounted(ops[i], byOp[i])
	}
	coldIdx, n, err := r.locateCold(ctx, group)
	if err != nil {
		for k, op := range group {
			report(idx[k], r.undo(ctx, now, op, counted[k], err))
		}
		return len(idx)
	}
	if n == 0 {
		report(idx[0], r.finishOne(ctx, now, group[0], byOp[idx[0]]))
		return 1
	}
	group = group[:n]
	errs := r.decideColdGroup(ctx, now, group, coldIdx, counted)
	for k, op := range group {
		err := errs[k]
		if err == nil {
			err = r.conclude(ctx, now, op, counted[k])
		} else {
			err = r.undo(ctx, now, op, counted[k], err)
		}
		report(idx[k], r.settle(ctx, now, op, err))
	}
	return n
}

// locateCold looks up, in one query per shard, which of the ops' cells
// outside hot have a cold row. It returns, per op, the indexes of its cold
// cells, for the ops before the first one with a cell that has none (a new
// cell), and how many ops that is.
func (r *Router) locateCold(ctx context.Context, ops []*tiers.Op) ([][]int, int, error) {
	type at struct{ op, cell int }
	var refs []tiers.Ref
	var where []at
	var hinted []bool
	for i, op := range ops {
		for j := range op.Route {
			if op.Route[j].Where == tiers.RouteUnknown {
				refs = append(refs, tiers.RefOf(&op.Cells[j]))
				where = append(where, at{i, j})
				hinted = append(hinted, r.hinted(&op.Cells[j]))
			}
		}
	}
	exists, err := r.coldRowsExist(ctx, refs, hinted)
	if err != nil {
		return nil, 0, err
	}
	coldIdx := make([][]int, len(ops))
	n := len(ops)
	for k, w := range where {
		if !exists[k] {
			n = w.op
			break
		}
		coldIdx[w.op] = append(coldIdx[w.op], w.cell)
	}
	return coldIdx[:n], n, nil
}

// coldRowsExist reports, per ref, whether it has a cold row: true for the
// hinted ones, as the cold part's MustExist will check, and for the others
// by one lookup per shard, whose finds become hints.
func (r *Router) coldRowsExist(ctx context.Context, refs []tiers.Ref, hinted []bool) ([]bool, error) {
	exists := make([]bool, len(refs))
	var look []tiers.Ref
	var at []int
	for k := range refs {
		if hinted[k] {
			exists[k] = true
		} else {
			look = append(look, refs[k])
			at = append(at, k)
		}
	}
	if r.cold == nil || len(look) == 0 {
		return exists, nil
	}
	found, err := r.cold.Exists(ctx, look)
	if err != nil {
		return nil, err
	}
	for m, k := range at {
		if exists[k] = found[m]; found[m] {
			r.hint(look[m])
		}
	}
	return exists, nil
}

// decideColdGroup decides the ops' cold cells (coldIdx) as one ColdStore
// group, applies what each part decided to its op and counted, and returns
// each op's error.
func (r *Router) decideColdGroup(ctx context.Context, now time.Time, ops []*tiers.Op, coldIdx [][]int, counted [][]int) []error {
	errs := make([]error, len(ops))
	var subs []*tiers.Op
	var owner []int
	for i, op := range ops {
		if len(coldIdx[i]) > 0 {
			subs = append(subs, r.partOp(op, coldIdx[i], tiers.Cold))
			owner = append(owner, i)
		}
	}
	if len(subs) == 0 {
		return errs
	}
	for k, err := range r.cold.CheckGroup(ctx, now, subs) {
		i := owner[k]
		if err != nil {
			r.forgetHints(ops[i], coldIdx[i], err)
			errs[i] = err
			continue
		}
		counted[i] = r.applyPart(ops[i], coldIdx[i], subs[k], tiers.Cold, counted[i])
	}
	return errs
}
