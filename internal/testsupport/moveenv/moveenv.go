// Package moveenv is test support: the three tiers, a router over them and
// a fake clock, for the tests of moves between tiers (packages migrate and
// migrate/worker), with cells to check, move and count. It does not import
// migrate (migrate's internal tests use it): a test gives the Env its
// mover's MoveCells (Moving).
package moveenv

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/cold"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/routing"
	"github.com/quota-platform/quota/tiers/warm"
)

// T0 is the tests' clock: inside an hour, far from its end.
var T0 = time.Date(2026, 5, 4, 10, 20, 0, 0, time.UTC)

// Env is the tiers of one test.
type Env struct {
	Router *routing.Router
	Hot    *hot.Mover
	Warm   *warm.Store
	Cold   *cold.Store
	Clock  *clock.Fake             // the tests' time; the worker's goroutines read it too
	Nodes  []*testenv.RedisProcess // the Redis Cluster's masters, if on one
	RDB    redis.UniversalClient
	Prefix string // the test's own key prefix
	// MoveRefs moves refs from one tier to another and says how many
	// moved: the test's mover (migrate.Mover.MoveCells, through Moving),
	// for Move.
	MoveRefs func(ctx context.Context, refs []tiers.Ref, from, to tiers.Tier) (int, error)
}

// New builds the three tiers (a Redis prefix and two shard DBs of the
// test's own) and a router.
func New(t testing.TB) *Env {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	return build(t, rdb, prefix, hot.Options{Prefix: prefix, Jitter: time.Second}, nil)
}

// NewCluster is New on a Redis Cluster of three masters the test starts
// (its nodes in Env.Nodes).
func NewCluster(t *testing.T) *Env {
	t.Helper()
	nodes := testenv.StartRedisCluster(t, 3)
	cc := testenv.ClusterClient(t, nodes, nil)
	return build(t, cc, "c:", hot.Options{Prefix: "c:"}, nodes)
}

func build(t testing.TB, rdb redis.UniversalClient, prefix string, ho hot.Options, nodes []*testenv.RedisProcess) *Env {
	hs := hot.NewStore(rdb, ho)
	ws := warm.NewStore(rdb, warm.Options{Prefix: prefix})
	cs := cold.NewStore(testenv.MySQLShards(t, 2), cold.Options{})
	e := &Env{Router: routing.NewRouter(hs, ws, cs), Warm: ws, Cold: cs, Clock: clock.NewFake(T0), Nodes: nodes, RDB: rdb, Prefix: prefix}
	e.Hot = &hot.Mover{Hot: e.Router.Hot(), Warm: ws, Now: e.Clock.Now}
	return e
}

// Moving is a copy of e whose Move moves with move (a mover's MoveCells),
// moved saying how many cells a move's result moved.
func Moving[R any](e *Env, move func(context.Context, []tiers.Ref, tiers.Tier, tiers.Tier) (R, error), moved func(R) int) *Env {
	own := *e
	own.MoveRefs = func(ctx context.Context, refs []tiers.Ref, from, to tiers.Tier) (int, error) {
		res, err := move(ctx, refs, from, to)
		return moved(res), err
	}
	return &own
}

// Cell is a fixed-window cell of a rule over an app and a user.
type Cell struct {
	Rule, App, User string
	Limit           int64
	Window          time.Duration
}

// NewCell is a cell of an hour of a new rule, app and user.
func NewCell(limit int64) Cell {
	return Cell{Rule: "r" + testenv.RandomHex(3), App: "app-" + testenv.RandomHex(3), User: "u-" + testenv.RandomHex(4), Limit: limit, Window: time.Hour}
}

// NewCells makes n cells of limit, spread over apps apps (tags; 0: an app
// each).
func NewCells(n int, limit int64, apps int) []Cell {
	cells := make([]Cell, n)
	for i := range cells {
		cells[i] = NewCell(limit)
		if apps > 0 {
			cells[i].App = cells[i%apps].App
		}
	}
	return cells
}

// At is the cell as checked at now.
func (c Cell) At(now time.Time) tiers.Cell {
	id := tiers.IdentityOf(c.Rule, []string{c.App, c.User})
	return tiers.Cell{
		Algorithm: rules.FixedWindow,
		Limit:     c.Limit,
		Window:    c.Window,
		Identity:  id,
		Key:       tiers.FixedKeyOf(tiers.CellIDOf(id, c.Window), now.UnixMilli()/c.Window.Milliseconds()),
		Tag:       tiers.TagOf(c.App),
		ShardKey:  tiers.ShardKeyOf(c.App, c.User),
	}
}

// Ref is the cell's Ref.
func (c Cell) Ref() tiers.Ref { cell := c.At(T0); return tiers.RefOf(&cell) }

// Refs are the cells' Refs.
func Refs(cs ...Cell) []tiers.Ref {
	out := make([]tiers.Ref, len(cs))
	for i, c := range cs {
		out[i] = c.Ref()
	}
	return out
}

// Check sends one op over cells through the router.
func (e *Env) Check(t testing.TB, mode tiers.Mode, cs ...Cell) *tiers.Op {
	t.Helper()
	op := &tiers.Op{Cost: 1, Mode: mode}
	for _, c := range cs {
		op.Cells = append(op.Cells, c.At(e.Clock.Now()))
	}
	if err := e.Router.Check(context.Background(), e.Clock.Now(), []*tiers.Op{op}); err != nil {
		t.Errorf("check: %v", err)
		return nil
	}
	return op
}

// TierOf is where the directory says c lives ("" while frozen).
func (e *Env) TierOf(t testing.TB, c Cell) tiers.Tier {
	t.Helper()
	ts, err := e.Warm.Tiers(context.Background(), Refs(c), e.Cold)
	if err != nil {
		t.Fatal(err)
	}
	return ts[0]
}

// Count reads c's count for the current window from the tier that holds it.
func (e *Env) Count(t testing.TB, c Cell) int64 {
	t.Helper()
	ctx := context.Background()
	refs := Refs(c)
	var recs []tiers.Record
	var err error
	switch e.TierOf(t, c) {
	case tiers.Hot:
		recs, err = e.Hot.Export(ctx, refs)
	case tiers.Warm:
		recs, err = e.Warm.Export(ctx, refs)
	case tiers.Cold:
		recs, err = e.Cold.Export(ctx, refs)
	default:
		t.Fatalf("cell %s is frozen", c.Rule)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Index() == e.Clock.Now().Unix()/int64(c.Window/time.Second) {
			return r.Count
		}
	}
	return 0
}

// Move moves cells from one tier to another (MoveRefs) and fails t unless
// all of them moved.
func (e *Env) Move(t testing.TB, from, to tiers.Tier, cs ...Cell) {
	t.Helper()
	moved, err := e.MoveRefs(context.Background(), Refs(cs...), from, to)
	if err != nil {
		t.Fatalf("move %s>%s: %v", from, to, err)
	}
	if moved != len(cs) {
		t.Fatalf("move %s>%s: moved %d of %d", from, to, moved, len(cs))
	}
}

// Place moves cells from hot to tier.
func (e *Env) Place(t testing.TB, tier tiers.Tier, cs ...Cell) {
	t.Helper()
	if tier != tiers.Hot {
		e.Move(t, tiers.Hot, tier, cs...)
	}
}

// ActivityRow is a cell's cell_activity row (migrate/activity).
type ActivityRow struct{ Since, Calls int64 }

// ActivityRows reads cell_activity of every shard.
func ActivityRows(t testing.TB, dbs []*sql.DB) map[tiers.CellID]ActivityRow {
	t.Helper()
	rows := map[tiers.CellID]ActivityRow{}
	for _, db := range dbs {
		rs, err := db.Query("SELECT k, since, calls FROM cell_activity")
		if err != nil {
			t.Fatal(err)
		}
		for rs.Next() {
			var k []byte
			var r ActivityRow
			if err := rs.Scan(&k, &r.Since, &r.Calls); err != nil {
				t.Fatal(err)
			}
			rows[tiers.CellID(k)] = r
		}
		rs.Close()
	}
	return rows
}

// FoldAll folds every part of parts of each shard's flushed activity with
// fold (activity.FoldLog), as a cycle does part by part.
func FoldAll(t testing.TB, dbs []*sql.DB, parts int, fold func(context.Context, *sql.DB, int) (int, error)) {
	t.Helper()
	for _, db := range dbs {
		for part := range parts {
			if _, err := fold(context.Background(), db, part); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// CountRows counts a table's rows over every shard.
func CountRows(t testing.TB, dbs []*sql.DB, table string) int {
	t.Helper()
	total := 0
	for _, db := range dbs {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		total += n
	}
	return total
}

// DailyRefs are n daily cells of n apps.
func DailyRefs(n int) []tiers.Ref {
	refs := make([]tiers.Ref, n)
	for i := range refs {
		app := "app-" + testenv.RandomHex(4)
		id := tiers.IdentityOf("daily", []string{app, testenv.RandomHex(6)})
		refs[i] = tiers.Ref{Identity: id, Window: 24 * time.Hour, Tag: tiers.TagOf(app), ShardKey: tiers.ShardKeyOf(app, "")}
	}
	return refs
}

// CellsOf is the fixed-window cells of refs, as the router hands a check's
// cells to its activity count (routing.Router.Calls).
func CellsOf(refs []tiers.Ref) []tiers.Cell {
	cells := make([]tiers.Cell, len(refs))
	for i, r := range refs {
		cells[i] = tiers.Cell{Algorithm: rules.FixedWindow, Window: r.Window, Identity: r.Identity, Tag: r.Tag, ShardKey: r.ShardKey}
	}
	return cells
}
