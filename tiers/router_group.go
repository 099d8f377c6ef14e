package tiers

import (
	"cmp"
	"context"
	"errors"
	"time"
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
// a later op of the run could see that count).

// finishRun finishes ops[0] alone, or the run of ops from ops[0] whose cold
// parts can be decided together, and returns how many ops it finished.
func (r *Router) finishRun(ctx context.Context, now time.Time, ops []*Op, byOp map[*Op][]call) (int, error) {
	n := 0
	for n < len(ops) && groupable(ops[n]) {
		n++
	}
	if n < 2 {
		return 1, r.finishOne(ctx, now, ops[0], byOp[ops[0]])
	}
	return r.finishGroup(ctx, now, ops[:n], byOp)
}

// groupable reports whether op can be finished in a group: no cell of it
// is warm or moving, and it is not an Enforce op with cells outside hot
// whose hot part denied.
func groupable(op *Op) bool {
	if op.route == nil {
		return true
	}
	outside := false
	for _, rt := range op.route {
		switch rt.where {
		case routeWarm, routeMoving:
			return false
		case routeUnknown:
			outside = true
		}
	}
	return !outside || op.Mode != Enforce || !hotDenied(op)
}

// hotDenied reports whether a non-shadow hot cell of op denied.
func hotDenied(op *Op) bool {
	for j := range op.Cells {
		hot := op.route == nil || op.route[j].where == routeHot
		if hot && !op.Out[j].Allowed && !op.Cells[j].Shadow {
			return true
		}
	}
	return false
}

// finishGroup finishes a run of groupable ops, up to the first that has a
// cell never seen before (that one goes alone next), and returns how many
// it finished. An op that fails gives back what it counted; the first
// error is returned once every op of the group is finished.
func (r *Router) finishGroup(ctx context.Context, now time.Time, ops []*Op, byOp map[*Op][]call) (int, error) {
	counted := make([][]int, len(ops))
	for i, op := range ops {
		counted[i] = hotCounted(op, byOp[op])
	}
	coldIdx, n, err := r.locateCold(ctx, ops)
	if err != nil {
		failed := []error{err}
		for i, op := range ops {
			if uerr := r.undo(ctx, now, op, counted[i], err); uerr != err {
				failed = append(failed, uerr)
			}
		}
		return len(ops), errors.Join(failed...)
	}
	if n == 0 {
		return 1, r.finishOne(ctx, now, ops[0], byOp[ops[0]])
	}
	ops = ops[:n]
	errs := r.decideColdGroup(ctx, now, ops, coldIdx, counted)
	var first error
	for i, op := range ops {
		err := errs[i]
		if err == nil {
			err = r.conclude(ctx, now, op, counted[i])
		} else {
			err = r.undo(ctx, now, op, counted[i], err)
		}
		first = cmp.Or(first, r.settle(ctx, now, op, err))
	}
	return n, first
}

// locateCold looks up, in one query per shard, which of the ops' cells
// outside hot have a cold row. It returns, per op, the indexes of its cold
// cells, for the ops before the first one with a cell that has none (a new
// cell), and how many ops that is.
func (r *Router) locateCold(ctx context.Context, ops []*Op) ([][]int, int, error) {
	type at struct{ op, cell int }
	var refs []Ref
	var where []at
	for i, op := range ops {
		for j := range op.route {
			if op.route[j].where == routeUnknown {
				refs = append(refs, RefOf(&op.Cells[j]))
				where = append(where, at{i, j})
			}
		}
	}
	exists := make([]bool, len(refs))
	if r.cold != nil && len(refs) > 0 {
		var err error
		if exists, err = r.cold.Exists(ctx, refs); err != nil {
			return nil, 0, err
		}
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

// decideColdGroup decides the ops' cold cells (coldIdx) as one ColdStore
// group, applies what each part decided to its op and counted, and returns
// each op's error.
func (r *Router) decideColdGroup(ctx context.Context, now time.Time, ops []*Op, coldIdx [][]int, counted [][]int) []error {
	errs := make([]error, len(ops))
	var subs []*Op
	var owner []int
	for i, op := range ops {
		if len(coldIdx[i]) > 0 {
			subs = append(subs, partOp(op, coldIdx[i]))
			owner = append(owner, i)
		}
	}
	if len(subs) == 0 {
		return errs
	}
	for k, err := range r.cold.checkEach(ctx, now, subs) {
		i := owner[k]
		if err != nil {
			errs[i] = err
			continue
		}
		counted[i] = r.applyPart(ops[i], coldIdx[i], subs[k], Cold, counted[i])
	}
	return errs
}
