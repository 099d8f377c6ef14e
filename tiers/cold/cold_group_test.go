package cold

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/internal/testsupport/tierstest"
	"github.com/quota-platform/quota/tiers"
)

// The cold tier's group commit: the ops of one Check share one transaction
// per shard, and each still stands or fails on its own.

func TestColdGroup_OpsOfOneCheckCommitOncePerShard(t *testing.T) {
	t.Parallel()
	dbs, faults := testenv.FaultyShards(t, 2)
	s := NewStore(dbs, Options{})
	commits := faults.CountCommits()
	var ops []*tiers.Op
	for i := range 24 {
		ops = append(ops, confOp(confT0, 1, tiers.Enforce, tierstest.CellOnShard(t, s, i%2, 5), tierstest.CellOnShard(t, s, (i/2)%2, 5)))
	}
	if err := s.Check(context.Background(), confT0, ops); err != nil {
		t.Fatal(err)
	}
	for i, op := range ops {
		if !op.Committed || op.Out[0].Remaining != 4 || op.Out[1].Remaining != 4 {
			t.Fatalf("op %d: committed %v outcomes %+v", i, op.Committed, op.Out)
		}
	}
	// The first attempt reserves the new rows and commits nothing.
	if n := commits.Load(); n != 2 {
		t.Fatalf("%d commits for 24 ops over 2 shards, want 2 (one per shard)", n)
	}
}

func TestColdGroup_OpsOnOneCellAreDecidedInOrderAsIfAlone(t *testing.T) {
	t.Parallel()
	s := NewStore(testenv.MySQLShards(t, 2), Options{})
	ctx := context.Background()
	c, other := newConfCell(5, time.Hour), newConfCell(100, time.Hour)
	steps := []struct {
		cost      int64
		mode      tiers.Mode
		cells     []confCell
		allowed   bool
		remaining int64
	}{
		{1, tiers.Enforce, []confCell{c}, true, 4},
		{3, tiers.Enforce, []confCell{c, other}, true, 1},
		{2, tiers.Enforce, []confCell{c}, false, 1},        // 4 + 2 > 5: denied, nothing counted
		{2, tiers.Enforce, []confCell{other, c}, false, 1}, // all or nothing: other not counted either
		{1, tiers.DryRun, []confCell{c}, true, 0},          // sees the counts before it, counts nothing
		{1, tiers.Refund, []confCell{c}, true, 2},          // gives 1 back: 3 used
		{2, tiers.Enforce, []confCell{c}, true, 0},
		{1, tiers.Report, []confCell{c}, false, 0}, // counted beyond the limit
	}
	var ops []*tiers.Op
	for _, st := range steps {
		ops = append(ops, confOp(confT0, st.cost, st.mode, st.cells...))
	}
	if err := s.Check(ctx, confT0, ops); err != nil {
		t.Fatal(err)
	}
	for i, st := range steps {
		o := ops[i].Out[slicesIndex(st.cells, c)]
		if o.Allowed != st.allowed || o.Remaining != st.remaining {
			t.Errorf("op %d: allowed %v remaining %d, want %v %d", i, o.Allowed, o.Remaining, st.allowed, st.remaining)
		}
	}
	e := &confEnv{Name: "cold", Store: s, Mover: s}
	if n := e.Count(t, confT0, c); n != 6 {
		t.Errorf("count %d, want 6 (1+3+2 counted, 1 refunded, 1 reported)", n)
	}
	if n := e.Count(t, confT0, other); n != 3 {
		t.Errorf("other's count %d, want 3", n)
	}
}

// slicesIndex is the index of c in cells.
func slicesIndex(cells []confCell, c confCell) int {
	for i := range cells {
		if cells[i].Rule == c.Rule {
			return i
		}
	}
	return -1
}

func TestColdGroup_AnOpThatFailsFailsAlone(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		setup func(t *testing.T, s *Store, c confCell) *tiers.Op
		want  error
	}{
		{"record moved away (MustExist, no row)", func(t *testing.T, _ *Store, c confCell) *tiers.Op {
			op := confOp(confT0, 1, tiers.Enforce, c)
			op.MustExist = true
			return op
		}, tiers.ErrMoved},
		{"corrupt row", func(t *testing.T, s *Store, c confCell) *tiers.Op {
			id := c.Ref().ID()
			if _, err := s.dbs[0].ExecContext(context.Background(), "INSERT INTO cold_cells (k, r) VALUES (?, ?)", id[:], []byte("junk")); err != nil {
				t.Fatal(err)
			}
			return confOp(confT0, 1, tiers.Enforce, c)
		}, tiers.ErrRecordCorrupt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := NewStore(testenv.MySQLShards(t, 1), Options{})
			a, bad, b := newConfCell(5, time.Hour), newConfCell(5, time.Hour), newConfCell(5, time.Hour)
			ops := []*tiers.Op{confOp(confT0, 1, tiers.Enforce, a), tc.setup(t, s, bad), confOp(confT0, 2, tiers.Enforce, b, a)}
			errs := s.CheckGroup(context.Background(), confT0, ops)
			if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], tc.want) {
				t.Fatalf("errors %v, want only op 1 failing with %v", errs, tc.want)
			}
			if !ops[0].Committed || ops[1].Committed || !ops[2].Committed {
				t.Fatalf("committed %v %v %v, want true false true", ops[0].Committed, ops[1].Committed, ops[2].Committed)
			}
			e := &confEnv{Name: "cold", Store: s, Mover: s}
			if na, nb := e.Count(t, confT0, a), e.Count(t, confT0, b); na != 3 || nb != 2 {
				t.Fatalf("counts a=%d b=%d, want 3 and 2", na, nb)
			}
		})
	}
}

func TestColdGroup_CommitFailureFailsTheOpsOnThatShardAndRefundsTheirOtherParts(t *testing.T) {
	t.Parallel()
	dbs, faults := testenv.FaultyShards(t, 2)
	s := NewStore(dbs, Options{})
	ctx := context.Background()
	a0, a1 := tierstest.CellOnShard(t, s, 0, 10), tierstest.CellOnShard(t, s, 1, 10)
	b0, b1 := tierstest.CellOnShard(t, s, 0, 10), tierstest.CellOnShard(t, s, 1, 10)
	// Rows exist, so the group commits at its first attempt.
	if err := s.Check(ctx, confT0, []*tiers.Op{confOp(confT0, 1, tiers.Enforce, a0, a1, b0, b1)}); err != nil {
		t.Fatal(err)
	}
	faults.Set(func(shard int) error {
		if shard == 1 {
			return errors.New("injected: connection lost at commit")
		}
		return nil
	})
	ops := []*tiers.Op{
		confOp(confT0, 2, tiers.Enforce, a0),     // shard 0 only: commits
		confOp(confT0, 3, tiers.Enforce, a1),     // shard 1 only: lost
		confOp(confT0, 4, tiers.Enforce, b0, b1), // both: lost, its shard-0 part refunded
	}
	errs := s.CheckGroup(ctx, confT0, ops)
	faults.Set(nil)
	if errs[0] != nil || !errors.Is(errs[1], tiers.ErrUnavailable) || !errors.Is(errs[2], tiers.ErrUnavailable) {
		t.Fatalf("errors %v, want nil, ErrUnavailable, ErrUnavailable", errs)
	}
	if !ops[0].Committed || ops[1].Committed || ops[2].Committed {
		t.Fatalf("committed %v %v %v, want true false false", ops[0].Committed, ops[1].Committed, ops[2].Committed)
	}
	e := &confEnv{Name: "cold", Store: s, Mover: s}
	for _, w := range []struct {
		name string
		c    confCell
		n    int64
	}{{"a0", a0, 3}, {"a1", a1, 1}, {"b0", b0, 1}, {"b1", b1, 1}} {
		if n := e.Count(t, confT0, w.c); n != w.n {
			t.Errorf("%s: count %d, want %d", w.name, n, w.n)
		}
	}
}

func TestColdGroup_AnOpWithoutCellsIsDecidedWithoutTouchingMySQL(t *testing.T) {
	t.Parallel()
	dbs, trips := testenv.CountedShards(t, 1)
	s := NewStore(dbs, Options{})
	op := &tiers.Op{Cost: 1, Mode: tiers.Enforce}
	if err := s.Check(context.Background(), confT0, []*tiers.Op{op}); err != nil || !op.Committed {
		t.Fatalf("err %v committed %v, want nil and true (nothing denies)", err, op.Committed)
	}
	if n := trips.Load(); n != 0 {
		t.Fatalf("%d round trips to MariaDB, want 0", n)
	}
}
