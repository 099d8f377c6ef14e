package cold

import (
	"context"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testenv"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
)

// The cell helpers of the cold store's tests: copies of the conformance
// suite's (tiers/conformance_test.go, an external test package, which
// these internal tests cannot import).

// confT0 is 250 ms into an hour (2026-03-02T10:00:00.250Z): hourly windows
// reset 3,599,750 ms later, minute windows 59,750 ms later.
var confT0 = time.Date(2026, 3, 2, 10, 0, 0, 250_000_000, time.UTC)

// confEnv is one store under test.
type confEnv struct {
	name  string
	store tiers.Store
	mover tiers.Mover // nil: the tier does not move records yet (hot: phase 2)
}

// confCell is a cell identity as a test names it; at(now) makes the Cell of
// the window holding now (the hot tier's key changes with the window).
type confCell struct {
	rule   string
	vals   []string
	limit  int64
	window time.Duration
	shadow bool
	app    string
	user   string
}

func newConfCell(limit int64, window time.Duration) confCell {
	app, user := "app-"+testenv.RandomHex(4), "user-"+testenv.RandomHex(4)
	return confCell{
		rule:   "conf_" + testenv.RandomHex(4),
		vals:   []string{app, user, "iface.get"},
		limit:  limit,
		window: window,
		app:    app,
		user:   user,
	}
}

func (c confCell) at(now time.Time) tiers.Cell {
	w := c.window.Milliseconds()
	return tiers.Cell{
		Algorithm: rules.FixedWindow,
		Limit:     c.limit,
		Window:    c.window,
		Shadow:    c.shadow,
		Identity:  tiers.IdentityOf(c.rule, c.vals),
		Key:       tiers.FixedKeyOf(tiers.CellIDOf(tiers.IdentityOf(c.rule, c.vals), c.window), now.UnixMilli()/w),
		Tag:       tiers.TagOf(c.app),
		ShardKey:  tiers.ShardKeyOf(c.app, c.user),
	}
}

func (c confCell) ref() tiers.Ref { cell := c.at(confT0); return tiers.RefOf(&cell) }

// op builds an op over cells at now.
func confOp(now time.Time, cost int64, mode tiers.Mode, cells ...confCell) *tiers.Op {
	op := &tiers.Op{Cost: cost, Mode: mode}
	for _, c := range cells {
		op.Cells = append(op.Cells, c.at(now))
	}
	return op
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
		recs, err := e.mover.Export(context.Background(), []tiers.Ref{c.ref()})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 || recs[0].Index() != now.UnixMilli()/c.window.Milliseconds() {
			return 0
		}
		return recs[0].Count
	}
	op := e.check(t, now, 1, tiers.DryRun, c)
	return c.limit - op.Out[0].Remaining - boolInt(op.Out[0].Allowed)
}

// spreadShards rerolls users until a, b and c do not all share a cold shard.
func spreadShards(t *testing.T, s *Store, a, b, c confCell) (confCell, confCell, confCell) {
	for range 100 {
		ra, rb, rc := a.ref(), b.ref(), c.ref()
		if sa := s.ShardOf(&ra); sa != s.ShardOf(&rb) || sa != s.ShardOf(&rc) {
			return a, b, c
		}
		b = newConfCell(b.limit, b.window)
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
