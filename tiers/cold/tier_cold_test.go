package cold

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/tiers"
)

// Cold-tier specifics: the evaluate-commit-compensate path across shards,
// lock-free dry runs, and the shard mapping.

func TestCold_CommitFailureAfterAnotherShardCommittedIsRefunded(t *testing.T) {
	t.Parallel()
	dbs, faults := testenv.FaultyShards(t, 2)
	s := NewStore(dbs, Options{})
	ctx := context.Background()
	a, b := spreadShards2(t, s, newConfCell(10, time.Hour), newConfCell(10, time.Hour))
	if err := s.Check(ctx, confT0, []*tiers.Op{confOp(confT0, 2, tiers.Enforce, a, b)}); err != nil {
		t.Fatal(err)
	}
	for _, failAt := range []int{1, 0} {
		// The group commits shard 0, then shard 1.
		faults.Set(func(shard int) error {
			if shard == failAt {
				return errors.New("injected: connection lost at commit")
			}
			return nil
		})
		err := s.Check(ctx, confT0, []*tiers.Op{confOp(confT0, 3, tiers.Enforce, a, b)})
		if !errors.Is(err, tiers.ErrUnavailable) {
			t.Fatalf("fail at %d: err %v, want ErrUnavailable", failAt, err)
		}
		faults.Set(nil)
		recs, err := s.Export(ctx, []tiers.Ref{a.Ref(), b.Ref()})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 2 || recs[0].Count != 2 || recs[1].Count != 2 {
			t.Fatalf("fail at %d: counts %+v, want both still 2", failAt, recs)
		}
	}
}

func TestCold_DryRunTakesNoLocks(t *testing.T) {
	t.Parallel()
	dbs := testenv.MySQLShards(t, 1)
	s := NewStore(dbs, Options{})
	ctx := context.Background()
	c := newConfCell(10, time.Hour)
	if err := s.Check(ctx, confT0, []*tiers.Op{confOp(confT0, 1, tiers.Enforce, c)}); err != nil {
		t.Fatal(err)
	}
	tx, err := dbs[0].BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	id := c.Ref().ID()
	if _, err := tx.ExecContext(ctx, "SELECT r FROM cold_cells WHERE k = ? FOR UPDATE", id[:]); err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	op := confOp(confT0, 1, tiers.DryRun, c)
	if err := s.Check(dctx, confT0, []*tiers.Op{op}); err != nil || op.Out[0].Remaining != 8 {
		t.Fatalf("dry run on a locked row: %v %+v", err, op.Out)
	}
}

func TestCold_CorruptRowFailsTheCheck(t *testing.T) {
	t.Parallel()
	dbs := testenv.MySQLShards(t, 1)
	s := NewStore(dbs, Options{})
	ctx := context.Background()
	c := newConfCell(10, time.Hour)
	id := c.Ref().ID()
	if _, err := dbs[0].ExecContext(ctx, "INSERT INTO cold_cells (k, r) VALUES (?, ?)", id[:], []byte("junk")); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx, confT0, []*tiers.Op{confOp(confT0, 1, tiers.Enforce, c)}); !errors.Is(err, tiers.ErrRecordCorrupt) {
		t.Fatalf("err %v, want ErrRecordCorrupt", err)
	}
}
