package cold

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/quota-platform/quota/tiers"
)

// Group commit of cold checks: all ops of one Check call are decided in one
// transaction per shard they touch (see Store).

// coldCell is one cell of an op: its id and shard.
type coldCell struct {
	id    tiers.CellID
	shard int
}

// coldGroup is the plan of one Check call.
type coldGroup struct {
	ops    []*tiers.Op
	cells  [][]coldCell     // per op; nil for an op that failed planning
	shards []int            // the shards touched, ascending
	ids    [][]tiers.CellID // per entry of shards: its distinct ids, ascending
	lock   bool             // some op counts or refunds: rows are locked
}

// Check decides ops in order, each as if sent alone, all or nothing per op,
// as one group (one transaction per shard touched). Every op is decided;
// an op that fails (ErrMoved, a corrupt row, a shard down) counts nothing,
// and Check returns the first op's error.
func (s *Store) Check(ctx context.Context, now time.Time, ops []*tiers.Op) error {
	for _, err := range s.CheckGroup(ctx, now, ops) {
		if err != nil {
			return err
		}
	}
	return nil
}

// CheckGroup decides ops as one group and returns each op's error.
func (s *Store) CheckGroup(ctx context.Context, now time.Time, ops []*tiers.Op) []error {
	errs := make([]error, len(ops))
	g := s.planGroup(ops, errs)
	if len(g.shards) == 0 { // no cells: nothing to read
		res, _ := decideGroup(now, g, map[tiers.CellID]*coldRow{})
		keepFirst(errs, res)
		return errs
	}
	if !g.lock {
		s.readGroup(ctx, now, g, errs)
		return errs
	}
	for attempt := 1; ; attempt++ {
		res, err := s.tryGroup(ctx, now, g)
		var ce *coldCommitError
		if errors.As(err, &ce) {
			s.commitFailed(ctx, now, g, res, ce, errs)
			return errs
		}
		if retry, err := s.again(ctx, err, attempt); retry {
			continue
		} else if err != nil {
			failAll(ops, errs, err)
			return errs
		}
		keepFirst(errs, res)
		return errs
	}
}

// failAll gives err to every op of a group that has no error yet.
func failAll(ops []*tiers.Op, errs []error, err error) {
	for i := range errs {
		if errs[i] == nil {
			errs[i] = err
			ops[i].Committed = false
		}
	}
}

// planGroup maps the cells of ops to ids and shards; an op with a cell
// the cold tier cannot hold gets its error in errs.
func (s *Store) planGroup(ops []*tiers.Op, errs []error) *coldGroup {
	g := &coldGroup{ops: ops, cells: make([][]coldCell, len(ops))}
	byShard := map[int][]tiers.CellID{}
	for i, op := range ops {
		op.Committed = false
		cells, err := s.planOp(op)
		if err != nil {
			errs[i] = err
			continue
		}
		g.cells[i] = cells
		g.lock = g.lock || op.Mode != tiers.DryRun
		for _, c := range cells {
			byShard[c.shard] = append(byShard[c.shard], c.id)
		}
	}
	for sh := range byShard {
		g.shards = append(g.shards, sh)
	}
	slices.Sort(g.shards)
	for _, sh := range g.shards {
		ids := byShard[sh]
		slices.SortFunc(ids, func(a, b tiers.CellID) int { return bytes.Compare(a[:], b[:]) })
		g.ids = append(g.ids, slices.Compact(ids))
	}
	return g
}

// planOp returns the cells of one op with their shards.
func (s *Store) planOp(op *tiers.Op) ([]coldCell, error) {
	for i := range op.Cells {
		if _, err := tiers.FixedWindowSeconds(&op.Cells[i]); err != nil {
			return nil, fmt.Errorf("cold check: %w", err)
		}
	}
	if len(s.dbs) == 0 {
		return nil, errors.New("cold check: no shard databases")
	}
	cells := make([]coldCell, len(op.Cells))
	for i := range op.Cells {
		ref := tiers.RefOf(&op.Cells[i])
		cells[i] = coldCell{id: ref.ID(), shard: s.ShardOf(&ref)}
	}
	return cells, nil
}

// readGroup decides a group of dry runs on rows read without locks.
func (s *Store) readGroup(ctx context.Context, now time.Time, g *coldGroup, errs []error) {
	rows := map[tiers.CellID]*coldRow{}
	for k, sh := range g.shards {
		if err := readChunks(ctx, s.dbs[sh], g.ids[k], rows); err != nil {
			failAll(g.ops, errs, fmt.Errorf("cold check shard %d: %w", sh, err))
			return
		}
	}
	res, _ := decideGroup(now, g, rows)
	keepFirst(errs, res)
}

// keepFirst gives each op without an error yet its error in res.
func keepFirst(errs, res []error) {
	for i := range errs {
		errs[i] = cmp.Or(errs[i], res[i])
	}
}

// readChunks reads ids without locks, in statements of at most coldChunk
// ids.
func readChunks(ctx context.Context, q coldQueryer, ids []tiers.CellID, rows map[tiers.CellID]*coldRow) error {
	for part := range slices.Chunk(ids, coldChunk) {
		if err := readCold(ctx, q, part, false, rows); err != nil {
			return err
		}
	}
	return nil
}

// decideGroup decides the planned ops in order on rows, each seeing the
// rows as the ops before it left them. It returns each op's error (an op
// that fails changes nothing) and whether any row changed.
func decideGroup(now time.Time, g *coldGroup, rows map[tiers.CellID]*coldRow) ([]error, bool) {
	res := make([]error, len(g.ops))
	changed := false
	for i, op := range g.ops {
		if g.cells[i] == nil {
			continue
		}
		c, err := decideCold(op, now, g.cells[i], rows)
		if err != nil {
			op.Committed = false
			res[i] = err
		}
		changed = changed || c
	}
	return res, changed
}

// decideCold decides one op on rows (a missing row is an empty one).
func decideCold(op *tiers.Op, now time.Time, cells []coldCell, rows map[tiers.CellID]*coldRow) (bool, error) {
	var stBuf [8]*tiers.RecState
	st := stBuf[:0]
	for _, c := range cells {
		r, ok := rows[c.id]
		if !ok {
			r = &coldRow{}
			rows[c.id] = r
		}
		if r.bad != nil {
			return false, r.bad
		}
		st = append(st, &r.state)
	}
	changed, err := tiers.DecideFixed(op, now, st, tiers.Cold)
	if err == nil && len(op.Records) == len(cells) {
		for i := range st {
			op.Records[i] = st[i].Rec
		}
	}
	return changed, err
}

// coldCommitError is a COMMIT that failed on g.shards[at]: the shards
// before it committed, the others rolled back.
type coldCommitError struct {
	at  int
	err error
}

func (e *coldCommitError) Error() string { return e.err.Error() }
func (e *coldCommitError) Unwrap() error { return e.err }

// tryGroup is one attempt at a group that counts: lock, decide, write and
// commit, each shard's transaction in two round trips (shardTx). It
// returns each op's decision error, or the error of the attempt (a
// *coldCommitError when a shard's write or commit failed).
func (s *Store) tryGroup(ctx context.Context, now time.Time, g *coldGroup) (res []error, err error) {
	txs := make([]*shardTx, len(g.shards))
	defer endAll(ctx, txs)
	rows := map[tiers.CellID]*coldRow{}
	for k, sh := range g.shards {
		tx, err := beginShardTx(ctx, s.dbs[sh])
		if err != nil {
			return nil, fmt.Errorf("cold check shard %d: begin: %w", sh, err)
		}
		txs[k] = tx
		if err := tx.lock(ctx, g.ids[k], rows); err != nil {
			return nil, fmt.Errorf("cold check shard %d: %w", sh, err)
		}
	}
	res, changed := decideGroup(now, g, rows)
	if !changed {
		return res, nil
	}
	if err := s.reserveMissing(ctx, g, rows, txs); err != nil {
		return nil, err
	}
	commits := make([]shardCommit, len(g.shards))
	for k := range g.shards {
		q, args, err := commitSQL(g.ids[k], rows)
		if err != nil {
			return nil, err
		}
		commits[k] = shardCommit{q, args}
	}
	return res, s.commitAll(ctx, g, txs, commits)
}

// shardCommit is a shard's writes and COMMIT, as one text (commitSQL).
type shardCommit struct {
	query string
	args  []any
}

// endAll ends every shard's transaction still open (rolling it back).
func endAll(ctx context.Context, txs []*shardTx) {
	for _, tx := range txs {
		tx.end(ctx)
	}
}

// reserveMissing: a counted cell without a row has nothing to lock (under
// REPEATABLE READ its SELECT ... FOR UPDATE took a gap lock, and concurrent
// first calls inserting into one gap deadlock each other). So the missing
// rows are reserved (an empty r) outside any transaction, after rolling
// back, and errColdReserved asks for another attempt: checks then lock
// existing rows only, in key order, shard by shard. (A reservation racing
// a check can still deadlock, rarely; InnoDB picks a victim and the group
// is tried again.) It returns nil when no row is missing.
func (s *Store) reserveMissing(ctx context.Context, g *coldGroup, rows map[tiers.CellID]*coldRow, txs []*shardTx) error {
	missing := make([][]tiers.CellID, len(g.shards))
	found := false
	for k := range g.shards {
		for _, id := range g.ids[k] {
			if r := rows[id]; r != nil && !r.exists && r.state.Present {
				missing[k] = append(missing[k], id)
				found = true
			}
		}
	}
	if !found {
		return nil
	}
	endAll(ctx, txs)
	for k, sh := range g.shards {
		for part := range slices.Chunk(missing[k], coldChunk) {
			if _, err := reserveCold(ctx, s.dbs[sh], part, nil); err != nil {
				return fmt.Errorf("cold check shard %d: %w", sh, err)
			}
		}
	}
	return errColdReserved
}

// commitAll writes and commits the shards in order; the first failure
// stops it (the transactions after it are rolled back by the caller). Every
// row a write touches exists and is locked (reserveMissing), so a write
// fails only as a commit can: the shard is unavailable.
func (s *Store) commitAll(ctx context.Context, g *coldGroup, txs []*shardTx, commits []shardCommit) error {
	for k, sh := range g.shards {
		if err := txs[k].commit(ctx, commits[k].query, commits[k].args); err != nil {
			// Ending it releases the locks of this shard when its commit
			// never ran.
			txs[k].end(ctx)
			// Not retried: %v keeps a MySQL error from looking retryable.
			return &coldCommitError{at: k, err: fmt.Errorf("cold check shard %d: commit: %w: %w: %v", sh, tiers.ErrUnavailable, tiers.ErrColdUnavailable, err)}
		}
	}
	return nil
}

// commitFailed settles a group whose commit failed at ce.at: an op with a
// cell in a shard that did not commit fails with ce, and what it counted
// in the shards that did is refunded (one compensating group); the other
// ops stand as decided (res).
func (s *Store) commitFailed(ctx context.Context, now time.Time, g *coldGroup, res []error, ce *coldCommitError, errs []error) {
	lost := g.shards[ce.at:]
	var refunds []*tiers.Op
	var owners []int
	for i, op := range g.ops {
		if errs[i] != nil {
			continue
		}
		if res[i] != nil {
			errs[i] = res[i]
			continue
		}
		if !touches(g.cells[i], lost) {
			continue
		}
		errs[i] = ce
		if op.Committed {
			if r := refundCommitted(op, g.cells[i], lost); r != nil {
				refunds = append(refunds, r)
				owners = append(owners, i)
			}
		}
		op.Committed = false
	}
	if len(refunds) == 0 {
		return
	}
	for k, err := range s.CheckGroup(context.WithoutCancel(ctx), now, refunds) {
		if err != nil {
			i := owners[k]
			errs[i] = errors.Join(errs[i], fmt.Errorf("cold compensation failed, counts %d too high: %w", g.ops[i].Cost, err))
		}
	}
}

// touches reports whether any of cells is on one of shards.
func touches(cells []coldCell, shards []int) bool {
	for _, c := range cells {
		if slices.Contains(shards, c.shard) {
			return true
		}
	}
	return false
}

// refundCommitted is the refund of op's cost in its cells outside lost
// (the shards that committed), nil when it has none.
func refundCommitted(op *tiers.Op, cells []coldCell, lost []int) *tiers.Op {
	refund := &tiers.Op{Cost: op.Cost, Mode: tiers.Refund}
	for i, c := range cells {
		if !slices.Contains(lost, c.shard) {
			refund.Cells = append(refund.Cells, op.Cells[i])
		}
	}
	if len(refund.Cells) == 0 {
		return nil
	}
	return refund
}
