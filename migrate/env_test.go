package migrate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/faultpoint"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/cold"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/routing"
	"github.com/quota-platform/quota/tiers/warm"
)

// t0 is the tests' clock: inside an hour, far from its end.
var t0 = time.Date(2026, 5, 4, 10, 20, 0, 0, time.UTC)

type env struct {
	router *routing.Router
	mover  *Mover
	hot    *hot.Mover
	warm   *warm.Store
	cold   *cold.Store
	clock  *clock.Fake             // the tests' time; the worker's goroutines read it too
	nodes  []*testenv.RedisProcess // the Redis Cluster's masters, if on one
}

// newEnv builds the three tiers (Redis prefix and two shard DBs of the
// test's own), a router and a mover.
func newEnv(t testing.TB) *env {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	hs := hot.NewStore(rdb, hot.Options{Prefix: prefix, Jitter: time.Second})
	warm := warm.NewStore(rdb, warm.Options{Prefix: prefix})
	cold := cold.NewStore(testenv.MySQLShards(t, 2), cold.Options{})
	e := &env{router: routing.NewRouter(hs, warm, cold), warm: warm, cold: cold, clock: clock.NewFake(t0)}
	e.hot = &hot.Mover{Hot: e.router.Hot(), Warm: warm, Now: e.clock.Now}
	e.mover = &Mover{RDB: rdb, Prefix: prefix, Hot: e.hot, Warm: warm, Cold: cold, LeaseTTL: 5 * time.Second}
	return e
}

// ownJournal returns a copy of e whose mover keeps its journal and leases
// under a prefix of its own: parallel subtests that run Repair over a
// shared journal would otherwise roll forward (and lease, for a moment)
// each other's cells, and a move the test expects to make would find its
// cell leased and skip it.
func (e *env) ownJournal() *env {
	own := *e
	m := *e.mover
	m.Prefix += "j" + testenv.RandomHex(4) + ":"
	own.mover = &m
	return &own
}

type cellSpec struct {
	rule, app, user string
	limit           int64
	window          time.Duration
}

func newCell(limit int64) cellSpec {
	return cellSpec{rule: "r" + testenv.RandomHex(3), app: "app-" + testenv.RandomHex(3), user: "u-" + testenv.RandomHex(4), limit: limit, window: time.Hour}
}

// newCells makes n cells of limit, spread over apps apps (tags; 0: an app
// each).
func newCells(n int, limit int64, apps int) []cellSpec {
	cells := make([]cellSpec, n)
	for i := range cells {
		cells[i] = newCell(limit)
		if apps > 0 {
			cells[i].app = cells[i%apps].app
		}
	}
	return cells
}

func (c cellSpec) at(now time.Time) tiers.Cell {
	id := tiers.IdentityOf(c.rule, []string{c.app, c.user})
	return tiers.Cell{
		Algorithm: rules.FixedWindow,
		Limit:     c.limit,
		Window:    c.window,
		Identity:  id,
		Key:       tiers.FixedKeyOf(tiers.CellIDOf(id, c.window), now.UnixMilli()/c.window.Milliseconds()),
		Tag:       tiers.TagOf(c.app),
		ShardKey:  tiers.ShardKeyOf(c.app, c.user),
	}
}

func (c cellSpec) ref() tiers.Ref { cell := c.at(t0); return tiers.RefOf(&cell) }

func refsOf(cs ...cellSpec) []tiers.Ref {
	out := make([]tiers.Ref, len(cs))
	for i, c := range cs {
		out[i] = c.ref()
	}
	return out
}

// check sends one op over cells through the router.
func (e *env) check(t testing.TB, mode tiers.Mode, cs ...cellSpec) *tiers.Op {
	t.Helper()
	op := &tiers.Op{Cost: 1, Mode: mode}
	for _, c := range cs {
		op.Cells = append(op.Cells, c.at(e.clock.Now()))
	}
	if err := e.router.Check(context.Background(), e.clock.Now(), []*tiers.Op{op}); err != nil {
		t.Errorf("check: %v", err)
		return nil
	}
	return op
}

// checkBatch sends n ops over cells through the router in one Check, as
// quotad's coalescer batches concurrent checks.
func (e *env) checkBatch(t testing.TB, mode tiers.Mode, n int, cs ...cellSpec) []*tiers.Op {
	t.Helper()
	now := e.clock.Now()
	ops := make([]*tiers.Op, n)
	for i := range ops {
		ops[i] = &tiers.Op{Cost: 1, Mode: mode}
		for _, c := range cs {
			ops[i].Cells = append(ops[i].Cells, c.at(now))
		}
	}
	if err := e.router.Check(context.Background(), now, ops); err != nil {
		t.Errorf("check: %v", err)
		return nil
	}
	return ops
}

// tierOf is where the directory says c lives ("" while frozen).
func (e *env) tierOf(t testing.TB, c cellSpec) tiers.Tier {
	t.Helper()
	ts, err := e.mover.TierOf(context.Background(), refsOf(c))
	if err != nil {
		t.Fatal(err)
	}
	return ts[0]
}

// count reads c's count for the current window from the tier that holds it.
func (e *env) count(t testing.TB, c cellSpec) int64 {
	t.Helper()
	ctx := context.Background()
	refs := refsOf(c)
	var recs []tiers.Record
	var err error
	switch e.tierOf(t, c) {
	case tiers.Hot:
		recs, err = e.hot.Export(ctx, refs)
	case tiers.Warm:
		recs, err = e.warm.Export(ctx, refs)
	case tiers.Cold:
		recs, err = e.cold.Export(ctx, refs)
	default:
		t.Fatalf("cell %s is frozen", c.rule)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Index() == e.clock.Now().Unix()/int64(c.window/time.Second) {
			return r.Count
		}
	}
	return 0
}

func (e *env) move(t testing.TB, from, to tiers.Tier, cs ...cellSpec) {
	t.Helper()
	res, err := e.mover.MoveCells(context.Background(), refsOf(cs...), from, to)
	if err != nil {
		t.Fatalf("move %s>%s: %v", from, to, err)
	}
	if len(res.Moved) != len(cs) {
		t.Fatalf("move %s>%s: moved %d of %d", from, to, len(res.Moved), len(cs))
	}
}

// takeFullProtocol puts cells in their tags' cold filters, as cells moved
// out of cold before are: a move of them hot>cold then takes the full
// protocol, not the quiet move (PROTOCOL.md, "Quiet cells").
func (e *env) takeFullProtocol(t testing.TB, cs ...cellSpec) {
	t.Helper()
	refs := refsOf(cs...)
	swaps := make([]warm.DirSwap, len(refs))
	for i := range refs {
		swaps[i].Ref = refs[i]
	}
	ok, err := e.warm.SwitchToCold(context.Background(), swaps, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range ok {
		if !b {
			t.Fatalf("cell %d not put in its cold filter", i)
		}
	}
}

// path moves cells from hot to tier along hot>warm>cold.
func (e *env) place(t testing.TB, tier tiers.Tier, cs ...cellSpec) {
	t.Helper()
	switch tier {
	case tiers.Warm:
		e.move(t, tiers.Hot, tiers.Warm, cs...)
	case tiers.Cold:
		e.move(t, tiers.Hot, tiers.Cold, cs...)
	}
}

// expectCell fails t unless c is in tier with count n, and exactly
// limit-n of 10 more checks are allowed (the cell is routable and exact).
func (e *env) expectCell(t *testing.T, when string, c cellSpec, tier tiers.Tier, n int64) {
	t.Helper()
	if got := e.tierOf(t, c); got != tier {
		t.Fatalf("%s: tier %q, want %q", when, got, tier)
	}
	if got := e.count(t, c); got != n {
		t.Fatalf("%s: count %d, want %d", when, got, n)
	}
	allowed := int64(0)
	for range 10 {
		if op := e.check(t, tiers.Enforce, c); op != nil && op.Allowed() {
			allowed++
		}
	}
	if want := min(10, c.limit-n); allowed != want {
		t.Fatalf("%s: %d more allowed, want %d", when, allowed, want)
	}
}

// crashingMover is a copy of e's mover that stops after step as a crash
// would (its leases left to lapse after leaseTTL).
func (e *env) crashingMover(step Step, leaseTTL time.Duration) *Mover {
	m := *e.mover
	m.LeaseTTL = leaseTTL
	m.Faults = afterStep(func(s Step) error {
		if s == step {
			return errors.New("crash")
		}
		return nil
	})
	return &m
}

// afterStep is fault points that run fn after each step of a move; an
// error stops the move there, as a crash would.
func afterStep(fn func(Step) error) faultpoint.Points {
	return &faultpoint.Funcs{MoveStep: func(s int) error { return fn(Step(s)) }}
}
