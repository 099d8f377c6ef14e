package routing

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/internal/testsupport/tierstest"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/cold"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/warm"
)

// The router hands the cold parts of a batch to the cold tier as one group:
// one transaction per shard for the batch, each op still decided as if
// sent alone, in order.

// newGroupRouter is a router over the test Redis (a prefix of its own) and
// two fresh shard databases.
func newGroupRouter(t *testing.T) (*Router, *cold.Store) {
	t.Helper()
	return newGroupRouterOn(t, testenv.MySQLShards(t, 2))
}

// newGroupRouterOn is newGroupRouter with the cold tier on dbs.
func newGroupRouterOn(t *testing.T, dbs []*sql.DB) (*Router, *cold.Store) {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	hot := hot.NewStore(rdb, hot.Options{Prefix: prefix})
	warm := warm.NewStore(rdb, warm.Options{Prefix: prefix})
	cold := cold.NewStore(dbs, cold.Options{})
	return NewRouter(hot, warm, cold), cold
}

// makeCold gives cells an empty cold record and adds them to their tag's
// cold filter, as a move's copy and switch do: the router then finds them
// cold.
func makeCold(t *testing.T, r *Router, cells ...confCell) {
	t.Helper()
	var recs []tiers.Record
	var swaps []warm.DirSwap
	for _, c := range cells {
		recs = append(recs, tiers.Record{Ref: c.Ref(), First: confT0.Unix(), Last: confT0.Unix()})
		swaps = append(swaps, warm.DirSwap{Ref: c.Ref()})
	}
	ctx := context.Background()
	if err := r.cold.Import(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.warm.SwitchToCold(ctx, swaps, nil); err != nil || slices.Contains(ok, false) {
		t.Fatalf("switch to cold: %v %v", ok, err)
	}
}

// makeWarm gives cells an empty warm record (their directory field).
func makeWarm(t *testing.T, r *Router, cells ...confCell) {
	t.Helper()
	var recs []tiers.Record
	for _, c := range cells {
		recs = append(recs, tiers.Record{Ref: c.Ref(), First: confT0.Unix(), Last: confT0.Unix()})
	}
	if err := r.warm.Import(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
}

// routerCheck sends ops through r in one Check.
func routerCheck(t *testing.T, r *Router, ops ...*tiers.Op) {
	t.Helper()
	if err := r.Check(context.Background(), confT0, ops); err != nil {
		t.Fatal(err)
	}
}

func TestRouter_ColdPartsOfABatchCommitOncePerShard(t *testing.T) {
	t.Parallel()
	dbs, faults := testenv.FaultyShards(t, 2)
	r, cold := newGroupRouterOn(t, dbs)
	var ops []*tiers.Op
	for i := range 20 {
		a, b := tierstest.CellOnShard(t, cold, 0, 10), tierstest.CellOnShard(t, cold, 1, 10)
		makeCold(t, r, a, b)
		ops = append(ops, confOp(confT0, 1, tiers.Enforce, a, b))
		if i%5 == 0 { // a hot op now and then stays in the run
			h := newConfCell(10, time.Hour)
			routerCheck(t, r, confOp(confT0, 1, tiers.DryRun, h)) // places it hot
			ops = append(ops, confOp(confT0, 1, tiers.Enforce, h))
		}
	}
	commits := faults.CountCommits()
	routerCheck(t, r, ops...)
	for i, op := range ops {
		if !op.Committed || op.Out[0].Remaining != 9 {
			t.Fatalf("op %d: committed %v outcomes %+v", i, op.Committed, op.Out)
		}
	}
	if n := commits.Load(); n != 2 {
		t.Fatalf("%d cold commits for a batch of 20 cold ops over 2 shards, want 2", n)
	}
}

func TestRouter_BatchIsDecidedInOrderAroundOpsThatGoAlone(t *testing.T) {
	t.Parallel()
	r, _ := newGroupRouter(t)
	c, full, fresh := newConfCell(2, time.Hour), newConfCell(1, time.Hour), newConfCell(10, time.Hour)
	makeCold(t, r, c)
	routerCheck(t, r, confOp(confT0, 1, tiers.Enforce, full)) // hot, at its limit
	steps := []struct {
		name    string
		mode    tiers.Mode
		cells   []confCell
		allowed bool
	}{
		{"cold", tiers.Enforce, []confCell{c}, true},
		// Denied by its hot part: its cold part must not be seen by the
		// next op (it goes alone: counted, then refunded).
		{"hot denies", tiers.Enforce, []confCell{full, c}, false},
		{"cold after a denied op", tiers.Enforce, []confCell{c}, true},
		// A new cell: placed, then the op is sent again, alone.
		{"new cell", tiers.Enforce, []confCell{fresh, c}, false},
		{"cold at its limit", tiers.Enforce, []confCell{c}, false},
		{"dry run", tiers.DryRun, []confCell{c}, false},
	}
	var ops []*tiers.Op
	for _, st := range steps {
		ops = append(ops, confOp(confT0, 1, st.mode, st.cells...))
	}
	routerCheck(t, r, ops...)
	for i, st := range steps {
		if ops[i].Allowed() != st.allowed {
			t.Errorf("%s: allowed %v, want %v (%+v)", st.name, ops[i].Allowed(), st.allowed, ops[i].Out)
		}
	}
	for _, w := range []struct {
		name string
		c    confCell
		tier tiers.Tier
		used int64
	}{{"cold cell", c, tiers.Cold, 2}, {"full hot cell", full, tiers.Hot, 1}, {"new cell", fresh, tiers.Hot, 0}} {
		if used, tier := usedOf(t, r, w.c); used != w.used || tier != w.tier {
			t.Errorf("%s after the batch: %d used in %s, want %d in %s", w.name, used, tier, w.used, w.tier)
		}
	}
}

// usedOf is c's count and tier as a dry run through r sees them.
func usedOf(t *testing.T, r *Router, c confCell) (int64, tiers.Tier) {
	t.Helper()
	op := confOp(confT0, 1, tiers.DryRun, c)
	routerCheck(t, r, op)
	return c.Limit - op.Out[0].Remaining - boolInt(op.Out[0].Allowed), op.Out[0].Tier
}

func TestRouter_GroupedOpDeniedInColdGivesBackItsHotPart(t *testing.T) {
	t.Parallel()
	r, _ := newGroupRouter(t)
	h, c, other := newConfCell(10, time.Hour), newConfCell(1, time.Hour), newConfCell(10, time.Hour)
	makeCold(t, r, c, other)
	routerCheck(t, r, confOp(confT0, 1, tiers.DryRun, h)) // places h hot
	routerCheck(t, r, confOp(confT0, 1, tiers.Enforce, c))
	ops := []*tiers.Op{
		confOp(confT0, 1, tiers.Enforce, h, c), // cold denies: h's count is given back
		confOp(confT0, 1, tiers.Enforce, other),
	}
	routerCheck(t, r, ops...)
	if ops[0].Allowed() || ops[0].Committed || !ops[1].Committed {
		t.Fatalf("allowed %v committed %v / %v, want denied, then counted", ops[0].Allowed(), ops[0].Committed, ops[1].Committed)
	}
	for _, w := range []struct {
		name string
		c    confCell
		used int64
	}{{"hot part given back", h, 0}, {"cold cell", c, 1}, {"other op", other, 1}} {
		if used, _ := usedOf(t, r, w.c); used != w.used {
			t.Errorf("%s: %d used, want %d", w.name, used, w.used)
		}
	}
}

// A refund that meets a cell frozen by a move is sent again until the move
// ends; what it had already given back elsewhere must not be given back
// again on each attempt.
func TestRouter_RefundRetriedOverAFrozenCellRefundsTheOthersOnce(t *testing.T) {
	t.Parallel()
	r, mover, op := opOverAFrozenCell(t, 300*time.Millisecond, 10)
	ctx := context.Background()
	a := op.Cells[0]
	if err := r.refundCells(ctx, confT0, op, []int{0, 1}); err == nil {
		t.Fatal("the refund of a frozen cell succeeded")
	}
	recs, err := mover.Export(ctx, []tiers.Ref{tiers.RefOf(&a)})
	if err != nil || len(recs) != 1 {
		t.Fatalf("export: %v %v", recs, err)
	}
	if recs[0].Count != 9 {
		t.Fatalf("hot cell holds %d after one refund of 1 from 10, want 9", recs[0].Count)
	}
}

// An op whose refund fails on a cell frozen past MovedWait must not be sent
// again (settle resends ops that failed with ErrMoved): its count was not
// given back, so a resend would count it twice. The fail mode answers it.
func TestRouter_FailedRefundIsNeverSentAgain(t *testing.T) {
	t.Parallel()
	r, _, op := opOverAFrozenCell(t, 100*time.Millisecond, 1)
	ctx := context.Background()
	cause := fmt.Errorf("cold part: %w", tiers.ErrMoved)
	err := r.undo(ctx, confT0, op, []int{0, 1}, cause)
	if err == nil {
		t.Fatal("the refund of a frozen cell succeeded")
	}
	if errors.Is(err, tiers.ErrMoved) {
		t.Fatalf("a failed refund's error is ErrMoved (the op would be sent again and count twice): %v", err)
	}
	if !errors.Is(err, tiers.ErrUnavailable) {
		t.Fatalf("a failed refund's error is not ErrUnavailable (the fail mode would not answer): %v", err)
	}
}

// opOverAFrozenCell places two hot cells a and b, counts n calls on both,
// freezes b (as a move out of hot does) and returns the router (with
// movedWait), the mover, and an Enforce op over a and b ready to decide.
func opOverAFrozenCell(t *testing.T, movedWait time.Duration, n int) (*Router, *hot.Mover, *tiers.Op) {
	t.Helper()
	r, _ := newGroupRouter(t)
	r.MovedWait = movedWait
	a, b := newConfCell(100, time.Hour), newConfCell(100, time.Hour)
	routerCheck(t, r, confOp(confT0, 1, tiers.DryRun, a, b)) // places both hot
	for range n {
		routerCheck(t, r, confOp(confT0, 1, tiers.Enforce, a, b))
	}
	mover := &hot.Mover{Hot: r.Hot(), Warm: r.warm, Now: func() time.Time { return confT0 }}
	if _, err := mover.FreezeExport(context.Background(), []tiers.Ref{b.Ref()}, false); err != nil {
		t.Fatal(err)
	}
	op := confOp(confT0, 1, tiers.Enforce, a, b)
	op.Out = make([]tiers.Outcome, 2)
	return r, mover, op
}

// The on-call migration decides a cold cell's promotion on the record its
// check left, handed to Observe, instead of reading the row again.
func TestRouter_ObserveGetsTheRecordAColdCheckLeft(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, 3} {
		t.Run(fmt.Sprintf("batch of %d", batch), func(t *testing.T) {
			t.Parallel()
			r, _ := newGroupRouter(t)
			cells := make([]confCell, batch)
			for i := range cells {
				cells[i] = newConfCell(10, time.Hour)
			}
			makeCold(t, r, cells...)
			seen := map[tiers.CellID]tiers.Record{}
			r.Observe = func(tier tiers.Tier, ref tiers.Ref, rec *tiers.Record) {
				if tier != tiers.Cold || rec == nil {
					t.Errorf("observed %s record %v, want cold with its record", tier, rec)
					return
				}
				seen[ref.ID()] = *rec
			}
			var now time.Time
			for Call := range 3 {
				now = confT0.Add(time.Duration(Call) * 10 * time.Second)
				var ops []*tiers.Op
				for _, c := range cells {
					ops = append(ops, confOp(now, 2, tiers.Enforce, c))
				}
				if err := r.Check(context.Background(), now, ops); err != nil {
					t.Fatal(err)
				}
			}
			for i, c := range cells {
				rec, ok := seen[c.Ref().ID()]
				if !ok || rec.Count != 6 || rec.Last != now.Unix() || rec.Samples == 0 {
					t.Fatalf("cell %d: observed %+v (seen %v), want the record after 3 calls of 2 (count 6, last %d, samples > 0)", i, rec, ok, now.Unix())
				}
			}
		})
	}
}
