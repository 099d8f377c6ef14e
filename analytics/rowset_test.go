package analytics

import (
	"cmp"
	"slices"
	"strings"
	"testing"

	"github.com/quota-platform/quota/analytics/usage"
	"github.com/quota-platform/quota/analytics/userdays"
)

// A rowset holds one usage_series row per (app, interface, minute), one
// usage_daily row per (app, interface, day) summing them, and one user row
// per call added; newRows says ahead how many rows a call adds (the fold's
// pending bound), and merge keeps all of it.
func TestRowset_RowsPerMinuteDayAndUser(t *testing.T) {
	t.Parallel()
	const day0 = 20000 * 86400
	type call struct {
		app, iface, user string
		t                int64
	}
	cases := []struct {
		name                    string
		calls                   []call
		series, daily, userRows int
	}{
		{"one call", []call{{"a", "i", "u", day0}}, 1, 1, 1},
		{"two minutes", []call{{"a", "i", "u", day0}, {"a", "i", "u", day0 + 60}, {"a", "i", "v", day0 + 60}}, 2, 1, 3},
		{"an older minute after newer ones", []call{{"a", "i", "", day0 + 120}, {"a", "i", "", day0 + 180}, {"a", "i", "", day0}, {"a", "i", "", day0 + 120}}, 3, 1, 0},
		{"two days", []call{{"a", "i", "u", day0 + 86340}, {"a", "i", "u", day0 + 86400}}, 2, 2, 2},
		{"interfaces and apps", []call{{"a", "i", "u", day0}, {"a", "j", "u", day0}, {"b", "i", "u", day0}}, 3, 3, 3},
		{"apps, minutes and interfaces interleaved", []call{{"b", "j", "", day0 + 60}, {"a", "j", "", day0}, {"b", "i", "", day0 + 120},
			{"a", "i", "", day0 + 60}, {"b", "j", "", day0}, {"a", "k", "", day0 + 86400}, {"a", "j", "", day0 + 60}}, 7, 5, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rs := newRowset()
			want := map[dailyKey]Counts{}
			for _, cl := range c.calls {
				k := dailyKey{app: cl.app, iface: cl.iface, day: Day(usage.FloorDiv(cl.t, 86400))}
				before := rs.len()
				grow := rs.daily[k].newRows(cl.t)
				d := rs.ifaceDay(k, rs.daily[k])
				rs.add(d, cl.t, Counts{Calls: 1, Allowed: 1})
				if cl.user != "" {
					rs.addUser(d.users, userdays.NewRow(userdays.Key{ID: makeRowID(cl.app, cl.iface, cl.user), Day: k.day}, Counts{Calls: 1, Allowed: 1}))
					grow++
				}
				if rs.len() != before+grow {
					t.Fatalf("call %+v: %d rows after %d, newRows said %d more", cl, rs.len(), before, grow)
				}
				w := want[k]
				w.Add(Counts{Calls: 1, Allowed: 1})
				want[k] = w
			}
			check := func(rs *rowset, times int64) {
				t.Helper()
				daily := rs.dailyRows()
				series := seriesRows(daily)
				if !slices.IsSortedFunc(daily, func(a, b dailyRow) int {
					return cmp.Or(strings.Compare(a.app, b.app), cmp.Compare(a.day, b.day), strings.Compare(a.iface, b.iface))
				}) || !slices.IsSortedFunc(series, func(a, b seriesRow) int {
					return cmp.Or(strings.Compare(a.app, b.app), cmp.Compare(a.t, b.t), strings.Compare(a.iface, b.iface))
				}) {
					t.Errorf("rows not in primary-key order: daily %+v, series %+v", daily, series)
				}
				if got := len(series); got != c.series || len(rs.daily) != c.daily || rs.nUsers != c.userRows*int(times) {
					t.Fatalf("%d series, %d daily, %d user rows; want %d, %d, %d", got, len(rs.daily), rs.nUsers, c.series, c.daily, c.userRows*int(times))
				}
				for k, d := range rs.daily {
					var sum Counts
					for _, m := range d.mins {
						sum.Add(m.Counts)
					}
					if w := want[k]; d.Counts != (Counts{Calls: w.Calls * times, Allowed: w.Allowed * times}) || sum != d.Counts {
						t.Errorf("%+v: day %+v, minutes sum to %+v, want %d calls", k, d.Counts, sum, w.Calls*times)
					}
				}
			}
			check(rs, 1)
			merged := newRowset()
			merged.merge(rs)
			merged.merge(rs)
			check(merged, 2)
		})
	}
}
