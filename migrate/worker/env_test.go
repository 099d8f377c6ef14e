package worker

// The env of the mover's tests (migrate/env_test.go), as far as the
// worker's tests use it.

import (
	"context"
	"testing"
	"time"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/migrate"
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
	mover  *migrate.Mover
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
	e.mover = &migrate.Mover{RDB: rdb, Prefix: prefix, Hot: e.hot, Warm: warm, Cold: cold, LeaseTTL: 5 * time.Second}
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

// newClusterEnv is newEnv on a Redis Cluster of three masters the test
// starts (its nodes in env.nodes).
func newClusterEnv(t *testing.T) *env {
	t.Helper()
	nodes := testenv.StartRedisCluster(t, 3)
	cc := testenv.ClusterClient(t, nodes, nil)
	hs := hot.NewStore(cc, hot.Options{Prefix: "c:"})
	warm := warm.NewStore(cc, warm.Options{Prefix: "c:"})
	cold := cold.NewStore(testenv.MySQLShards(t, 2), cold.Options{})
	e := &env{router: routing.NewRouter(hs, warm, cold), warm: warm, cold: cold, clock: clock.NewFake(t0), nodes: nodes}
	e.hot = &hot.Mover{Hot: e.router.Hot(), Warm: warm, Now: e.clock.Now}
	e.mover = &migrate.Mover{RDB: cc, Prefix: "c:", Hot: e.hot, Warm: warm, Cold: cold, LeaseTTL: 5 * time.Second}
	return e
}
