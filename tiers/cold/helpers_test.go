package cold

import (
	"context"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/tierstest"
	"github.com/quota-platform/quota/tiers"
)

// The cells of the tiers' tests (package tierstest), and the conformance
// suite's store environment (copied from tiers/conformance_test.go, an
// external test package, which these internal tests cannot import).
type confCell = tierstest.Cell

var (
	confT0      = tierstest.T0
	newConfCell = tierstest.NewCell
	confOp      = tierstest.Op
)

// confEnv is one store under test.
type confEnv struct {
	name  string
	store tiers.Store
	mover tiers.Mover // nil: the tier does not move records yet (hot: phase 2)
}

// check runs one op and fails the test on an error.
func (e *confEnv) check(t *testing.T, now time.Time, cost int64, mode tiers.Mode, cells ...confCell) *tiers.Op {
	t.Helper()
	op := confOp(now, cost, mode, cells...)
	if err := e.store.Check(context.Background(), now, []*tiers.Op{op}); err != nil {
		t.Fatalf("%s: check: %v", e.name, err)
	}
	for i := range op.Out {
		if op.Out[i].Tier != e.store.Tier() {
			t.Fatalf("%s: outcome tier %q", e.name, op.Out[i].Tier)
		}
	}
	return op
}

// count returns the cell's count in the current window, by Export where
// the tier moves records, else by a dry run (which cannot see past the limit).
func (e *confEnv) count(t *testing.T, now time.Time, c confCell) int64 {
	t.Helper()
	if e.mover != nil {
		recs, err := e.mover.Export(context.Background(), []tiers.Ref{c.Ref()})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 || recs[0].Index() != now.UnixMilli()/c.Window.Milliseconds() {
			return 0
		}
		return recs[0].Count
	}
	op := e.check(t, now, 1, tiers.DryRun, c)
	return c.Limit - op.Out[0].Remaining - boolInt(op.Out[0].Allowed)
}

// spreadShards rerolls users until a, b and c do not all share a cold shard.
func spreadShards(t *testing.T, s *Store, a, b, c confCell) (confCell, confCell, confCell) {
	for range 100 {
		ra, rb, rc := a.Ref(), b.Ref(), c.Ref()
		if sa := s.ShardOf(&ra); sa != s.ShardOf(&rb) || sa != s.ShardOf(&rc) {
			return a, b, c
		}
		b = newConfCell(b.Limit, b.Window)
	}
	t.Fatal("could not spread cells over shards")
	return a, b, c
}

func spreadShards2(t *testing.T, s *Store, a, b confCell) (confCell, confCell) {
	a, b, _ = spreadShards(t, s, a, b, b)
	return a, b
}

// boolInt is 1 for true, 0 for false (the scripts' flags).
func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
