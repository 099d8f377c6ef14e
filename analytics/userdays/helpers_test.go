package userdays

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quota-platform/quota/analytics/usage"
)

// The tests' helpers.

// t0Day is the tests' day: 2026-11-23, a Monday.
var t0Day = usage.DayOf(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))

// newTestStore is a Store as analytics.New makes it with the defaults,
// but flat out (duty 1: merges and seals do not rest).
func newTestStore() *Store {
	vec := func(name string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name}, []string{"table"})
	}
	return NewStore(500, 1, vec("rows"), vec("statements"))
}

// makeRowID is the usage.RowID of (app, iface, user), as Record makes it.
func makeRowID(app, iface, user string) usage.RowID {
	return usage.RowID(usage.AppendRowID(nil, app, iface, user))
}

// groups are user rows grouped per (app, day), as a flush holds them.
type groups map[AppDay]*Group

// add adds row to its group.
func (gs groups) add(row Row) {
	k := AppDay{App: row.ID.App(), Day: row.Day}
	g := gs[k]
	if g == nil {
		g = &Group{AppDay: k}
		gs[k] = g
	}
	g.Rows = append(g.Rows, row)
}

// inOrder are the groups in write order, as the flush hands them to Write.
func (gs groups) inOrder() []*Group {
	var out []*Group
	for _, g := range gs {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b *Group) int { return CompareAppDays(a.AppDay, b.AppDay) })
	return out
}

// sortGroup readies g's rows for Chunks, as the flush does.
func sortGroup(g *Group) { g.Rows = SortRows(g.Rows) }

// userDay is user's stored figures in app on day over every interface, as
// the stats query reads them (Stored).
func userDay(t *testing.T, u *Store, db *sql.DB, app, user string, day usage.Day) usage.Counts {
	t.Helper()
	ifaces := map[string]*usage.Counts{}
	if err := u.Stored(context.Background(), db, app, user, day, ifaces); err != nil {
		t.Fatal(err)
	}
	var total usage.Counts
	for _, c := range ifaces {
		total.Add(*c)
	}
	return total
}
