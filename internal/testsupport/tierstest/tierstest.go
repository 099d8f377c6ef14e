// Package tierstest holds what the tiers' tests share: cells named as a
// test names them (the conformance suite's, tiers/conformance_test.go) and
// the ops over them. It imports only the model, so the stores' internal
// tests and the router's can all use it. For tests only.
package tierstest

import (
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
