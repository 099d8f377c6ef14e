// Package tierstest holds what the tiers' tests share: cells named as a
// test names them (the conformance suite's, tiers/conformance_test.go) and
// the ops over them. It imports only the model, so the stores' internal
// tests and the router's can all use it. For tests only.
package tierstest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
)

// T0 is 250 ms into an hour (2026-03-02T10:00:00.250Z): hourly windows
// reset 3,599,750 ms later, minute windows 59,750 ms later.
var T0 = time.Date(2026, 3, 2, 10, 0, 0, 250_000_000, time.UTC)

// Cell is a cell identity as a test names it; At(now) makes the Cell of
// the window holding now (the hot tier's key changes with the window).
type Cell struct {
	Rule   string
	Vals   []string
	Limit  int64
	Window time.Duration
	Shadow bool
	App    string
	User   string
}

// NewCell is a fixed-window cell of an app and a user of its own.
func NewCell(limit int64, window time.Duration) Cell {
	app, user := "app-"+testenv.RandomHex(4), "user-"+testenv.RandomHex(4)
	return Cell{
		Rule:   "conf_" + testenv.RandomHex(4),
		Vals:   []string{app, user, "iface.get"},
		Limit:  limit,
		Window: window,
		App:    app,
		User:   user,
	}
}

// At is the Cell of c's window holding now.
func (c Cell) At(now time.Time) tiers.Cell {
	w := c.Window.Milliseconds()
	return tiers.Cell{
		Algorithm: rules.FixedWindow,
		Limit:     c.Limit,
		Window:    c.Window,
		Shadow:    c.Shadow,
		Identity:  tiers.IdentityOf(c.Rule, c.Vals),
		Key:       tiers.FixedKeyOf(tiers.CellIDOf(tiers.IdentityOf(c.Rule, c.Vals), c.Window), now.UnixMilli()/w),
		Tag:       tiers.TagOf(c.App),
		ShardKey:  tiers.ShardKeyOf(c.App, c.User),
	}
}

// Ref is c's Ref.
func (c Cell) Ref() tiers.Ref { cell := c.At(T0); return tiers.RefOf(&cell) }

// Op builds an op over cells at now.
func Op(now time.Time, cost int64, mode tiers.Mode, cells ...Cell) *tiers.Op {
	op := &tiers.Op{Cost: cost, Mode: mode}
	for _, c := range cells {
		op.Cells = append(op.Cells, c.At(now))
	}
	return op
}

// Env is one store under test.
type Env struct {
	Name  string
	Store tiers.Store
	Mover tiers.Mover // nil: the tier cannot round-trip a full record (hot)
}

// Check runs one op over cells at now and fails the test on an error or
// an outcome of another tier.
func (e *Env) Check(t testing.TB, now time.Time, cost int64, mode tiers.Mode, cells ...Cell) *tiers.Op {
	t.Helper()
	op := Op(now, cost, mode, cells...)
	if err := e.Store.Check(context.Background(), now, []*tiers.Op{op}); err != nil {
		t.Fatalf("%s: check: %v", e.Name, err)
	}
	for i := range op.Out {
		if op.Out[i].Tier != e.Store.Tier() {
			t.Fatalf("%s: outcome tier %q", e.Name, op.Out[i].Tier)
		}
	}
	return op
}

// Count returns the cell's count in the current window, by Export where
// the tier moves records, else by a dry run (which cannot see past the limit).
func (e *Env) Count(t testing.TB, now time.Time, c Cell) int64 {
	t.Helper()
	if e.Mover != nil {
		recs, err := e.Mover.Export(context.Background(), []tiers.Ref{c.Ref()})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 || recs[0].Index() != now.UnixMilli()/c.Window.Milliseconds() {
			return 0
		}
		return recs[0].Count
	}
	op := e.Check(t, now, 1, tiers.DryRun, c)
	n := c.Limit - op.Out[0].Remaining
	if op.Out[0].Allowed {
		n--
	}
	return n
}

// Sharded is a store that places a cell's row on one of its shards (the
// cold store).
type Sharded interface {
	ShardOf(*tiers.Ref) int
}

// CellOnShard returns a new cell whose cold row lives on shard of s.
func CellOnShard(t testing.TB, s Sharded, shard int, limit int64) Cell {
	t.Helper()
	for range 200 {
		c := NewCell(limit, time.Hour)
		if ref := c.Ref(); s.ShardOf(&ref) == shard {
			return c
		}
	}
	t.Fatalf("no cell found on shard %d", shard)
	return Cell{}
}

// BenchCells are n pairs of cells of one app each: one counted per IP, one
// per user (the platform's two rules), limits no benchmark reaches.
func BenchCells(n int) [][2]Cell {
	out := make([][2]Cell, n)
	for i := range out {
		ip := NewCell(1<<40, time.Hour)
		ip.Vals = []string{ip.App, fmt.Sprintf("10.0.%d.%d", i/256, i%256)}
		ip.User = ""
		u := NewCell(1<<40, time.Hour)
		u.App = ip.App
		u.Vals[0] = ip.App
		out[i] = [2]Cell{ip, u}
	}
	return out
}
