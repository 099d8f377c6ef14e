package tiers

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// Cold-tier specifics: the evaluate-commit-compensate path across shards,
// lock-free dry runs, and the shard mapping.

func TestCold_CommitFailureAfterAnotherShardCommittedIsRefunded(t *testing.T) {
	t.Parallel()
	dbs, faults := faultyShards(t, 2)
	s := NewColdStore(dbs, ColdOptions{})
	ctx := context.Background()
	a, b := spreadShards2(t, s, newConfCell(10, time.Hour), newConfCell(10, time.Hour))
	if err := s.Check(ctx, confT0, []*Op{confOp(confT0, 2, Enforce, a, b)}); err != nil {
		t.Fatal(err)
	}
	for _, failAt := range []int{1, 0} {
		// The group commits shard 0, then shard 1.
		faults.set(func(shard int) error {
			if shard == failAt {
				return errors.New("injected: connection lost at commit")
			}
			return nil
		})
		err := s.Check(ctx, confT0, []*Op{confOp(confT0, 3, Enforce, a, b)})
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("fail at %d: err %v, want ErrUnavailable", failAt, err)
		}
		faults.set(nil)
		recs, err := s.Export(ctx, []Ref{a.ref(), b.ref()})
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
	s := NewColdStore(dbs, ColdOptions{})
	ctx := context.Background()
	c := newConfCell(10, time.Hour)
	if err := s.Check(ctx, confT0, []*Op{confOp(confT0, 1, Enforce, c)}); err != nil {
		t.Fatal(err)
	}
	tx, err := dbs[0].BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	id := c.ref().ID()
	if _, err := tx.ExecContext(ctx, "SELECT r FROM cold_cells WHERE k = ? FOR UPDATE", id[:]); err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	op := confOp(confT0, 1, DryRun, c)
	if err := s.Check(dctx, confT0, []*Op{op}); err != nil || op.Out[0].Remaining != 8 {
		t.Fatalf("dry run on a locked row: %v %+v", err, op.Out)
	}
}

func TestCold_CorruptRowFailsTheCheck(t *testing.T) {
	t.Parallel()
	dbs := testenv.MySQLShards(t, 1)
	s := NewColdStore(dbs, ColdOptions{})
	ctx := context.Background()
	c := newConfCell(10, time.Hour)
	id := c.ref().ID()
	if _, err := dbs[0].ExecContext(ctx, "INSERT INTO cold_cells (k, r) VALUES (?, ?)", id[:], []byte("junk")); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx, confT0, []*Op{confOp(confT0, 1, Enforce, c)}); !errors.Is(err, ErrRecordCorrupt) {
		t.Fatalf("err %v, want ErrRecordCorrupt", err)
	}
}

func TestShard_KeysAndMappingAreStable(t *testing.T) {
	t.Parallel()
	// Golden values: a change here moves every cold row to another shard.
	if k := ShardKeyOf("a1", "u42"); k != 0x7f6713abc76c7417 {
		t.Errorf("ShardKeyOf(a1, u42) = %#x", k)
	}
	if k := ShardKeyOf("a1", ""); k == ShardKeyOf("a", "1") {
		t.Error("length prefixes do not separate app and user")
	}
	// The published jump hash vectors (as in github.com/dgryski/go-jump), then ours.
	for _, v := range []struct {
		key      uint64
		n, shard int
	}{{1, 1, 0}, {42, 57, 43}, {0xDEAD10CC, 1, 0}, {0xDEAD10CC, 666, 361}, {256, 1024, 520},
		{0x7f6713abc76c7417, 2, 1}, {0x7f6713abc76c7417, 3, 1}, {0x7f6713abc76c7417, 64, 14}} {
		if got := JumpShard(v.key, v.n); got != v.shard {
			t.Errorf("JumpShard(%#x, %d) = %d, want %d", v.key, v.n, got, v.shard)
		}
	}
	// Growing N to N+1 only moves keys onto the new shard, about 1/(N+1) of them.
	moved, counts := 0, make([]int, 4)
	for i := range 40000 {
		k := ShardKeyOf("app", string(rune(i)))
		a, b := JumpShard(k, 3), JumpShard(k, 4)
		counts[a]++
		if a != b {
			moved++
			if b != 3 {
				t.Fatalf("key moved from %d to %d, not to the new shard", a, b)
			}
		}
	}
	if moved < 9000 || moved > 11000 {
		t.Errorf("%d of 40000 moved growing 3 -> 4 shards, want ~10000", moved)
	}
	for i, c := range counts[:3] {
		if c < 12500 || c > 14200 {
			t.Errorf("shard %d holds %d of 40000 keys over 3 shards", i, c)
		}
	}
}
