package warm

import (
	"time"

	"github.com/quota-platform/quota/internal/testenv"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
)

// The cell helpers of the warm store's tests: copies of the conformance
// suite's (tiers/conformance_test.go, an external test package, which
// these internal tests cannot import), and tier_record_test.go's recT.

// confT0 is 250 ms into an hour (2026-03-02T10:00:00.250Z): hourly windows
// reset 3,599,750 ms later, minute windows 59,750 ms later.
var confT0 = time.Date(2026, 3, 2, 10, 0, 0, 250_000_000, time.UTC)

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

var recT = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC).Unix()
