package analytics

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
	"unique"

	"github.com/quota-platform/quota/analytics/usage"
	"github.com/quota-platform/quota/analytics/userdays"
)

// Resolution is the width of a curve point.
type Resolution int64

// The resolutions of the curves, and how long points of each are kept.
const (
	Res1m Resolution = 60
	Res5m Resolution = 300
	Res1h Resolution = 3600
	Res1w Resolution = 604800

	// Retention of each resolution's points before they are rolled up.
	Keep1m = 24 * time.Hour
	Keep5m = 7 * 24 * time.Hour
	Keep1h = 31 * 24 * time.Hour
)

// weekOffset aligns weeks on Monday 00:00 UTC (1970-01-05 was a Monday).
const weekOffset = 4 * 86400

var allResolutions = []Resolution{Res1m, Res5m, Res1h, Res1w}

func (r Resolution) String() string {
	switch r {
	case Res1m:
		return "1m"
	case Res5m:
		return "5m"
	case Res1h:
		return "1h"
	case Res1w:
		return "1w"
	}
	return fmt.Sprintf("%ds", int64(r))
}

// ParseResolution reads "1m", "5m", "1h" or "1w".
func ParseResolution(s string) (Resolution, bool) {
	for _, r := range allResolutions {
		if r.String() == s {
			return r, true
		}
	}
	return 0, false
}

// Floor is the start (Unix seconds) of the point holding Unix time t.
func (r Resolution) Floor(t int64) int64 {
	if r == Res1w {
		return usage.FloorDiv(t-weekOffset, int64(r))*int64(r) + weekOffset
	}
	return usage.FloorDiv(t, int64(r)) * int64(r)
}

// ResolutionFor is the resolution of a curve whose oldest point is at from,
// asked at now: the finest whose retention still covers from.
func ResolutionFor(from, now time.Time) Resolution {
	age := now.Sub(from)
	switch {
	case age <= Keep1m:
		return Res1m
	case age <= Keep5m:
		return Res5m
	case age <= Keep1h:
		return Res1h
	}
	return Res1w
}

// seriesRow is a usage_series row of a 1-minute point.
type seriesRow struct {
	app, iface string
	t          int64 // minute start
	Counts
}

type dailyKey struct {
	app, iface string
	day        Day
}

// rowset is a set of rows to write. The per-user rows are lists per (app,
// day), sorted and summed by the write; nUsers counts them unsummed (the
// pending bound errs on the safe side). The usage_daily and usage_series
// rows of one (app, interface, day) are one ifaceDay, which also leads to
// the (app, day)'s user rows: one map probe per row folded.
type rowset struct {
	daily   map[dailyKey]*ifaceDay
	users   map[userdays.AppDay]*userdays.Group
	nSeries int // minutes held in daily's ifaceDays
	nUsers  int
}

// ifaceDay is the pending figures of one (app, interface, day): its
// usage_daily row and its usage_series rows.
type ifaceDay struct {
	Counts
	mins  []minuteCounts  // in the order first added: nearly always ascending
	users *userdays.Group // the (app, day)'s user rows
	first [2]minuteCounts // mins' first backing array: a flush's calls fall in one or two minutes
	names canonicalNames  // keeps the key's names canonical while the row lives
}

// minuteCounts is a usage_series row of a 1-minute point.
type minuteCounts struct {
	t int64 // minute start
	Counts
}

// minute is the row of minute t (nil: none). It looks from the newest:
// a flush adds to the last minute or two.
func (d *ifaceDay) minute(t int64) *Counts {
	for i := len(d.mins) - 1; i >= 0; i-- {
		if d.mins[i].t == t {
			return &d.mins[i].Counts
		}
	}
	return nil
}

// newRows is the rows a call of minute t adds to d (nil: none yet).
func (d *ifaceDay) newRows(t int64) int {
	switch {
	case d == nil:
		return 2 // daily and series
	case d.minute(t) == nil:
		return 1
	}
	return 0
}

func newRowset() *rowset {
	return &rowset{daily: map[dailyKey]*ifaceDay{}, users: map[userdays.AppDay]*userdays.Group{}}
}

// next returns an empty rowset with room for as many rows as r holds: the
// next flush will likely hold as many.
func (r *rowset) next() *rowset {
	n := &rowset{daily: make(map[dailyKey]*ifaceDay, len(r.daily)), users: make(map[userdays.AppDay]*userdays.Group, len(r.users))}
	for k, g := range r.users {
		if len(g.Rows) > 0 {
			n.users[k] = &userdays.Group{AppDay: k, Rows: make([]userdays.Row, 0, len(g.Rows)+len(g.Rows)/4)}
		}
	}
	return n
}

func (r *rowset) len() int { return r.nSeries + len(r.daily) + r.nUsers }

// ifaceDay returns k's row: cur, which the caller has looked up, or else a
// new one, whose key holds canonical copies of its names (unique.Make), not
// substrings that keep a row id alive.
func (r *rowset) ifaceDay(k dailyKey, cur *ifaceDay) *ifaceDay {
	if cur != nil {
		return cur
	}
	names := internNames(&k.app, &k.iface)
	d := &ifaceDay{users: r.group(userdays.AppDay{App: k.app, Day: k.day}), names: names}
	d.mins = d.first[:0]
	r.daily[k] = d
	return d
}

// canonicalNames holds the unique.Handles of an app's and an interface's
// canonical copies. unique keeps a canonical copy only while a Handle to
// it lives, not while strings made from it do: without these, a
// collection between two rows' interning gives the second row a copy of
// its own.
type canonicalNames struct{ app, iface unique.Handle[string] }

// internNames replaces *app and *iface by their canonical copies and
// returns the handles that keep them canonical.
func internNames(app, iface *string) canonicalNames {
	n := canonicalNames{unique.Make(*app), unique.Make(*iface)}
	*app, *iface = n.app.Value(), n.iface.Value()
	return n
}

// add adds c to d's day and to its minute t.
func (r *rowset) add(d *ifaceDay, t int64, c Counts) {
	d.Counts.Add(c)
	if m := d.minute(t); m != nil {
		m.Add(c)
		return
	}
	d.mins = append(d.mins, minuteCounts{t: t, Counts: c})
	r.nSeries++
}

// splitFrom moves the minutes from t0 on out of r into a new rowset (made
// with r.next()'s room), which it returns: their series rows and their
// share of the daily rows. A day row left without minutes is dropped; the
// user rows stay in r.
func (r *rowset) splitFrom(t0 int64) *rowset {
	out := r.next()
	for k, d := range r.daily {
		kept := d.mins[:0]
		for _, m := range d.mins {
			if m.t < t0 {
				kept = append(kept, m)
				continue
			}
			out.add(out.ifaceDay(k, out.daily[k]), m.t, m.Counts)
			d.Counts.Sub(m.Counts)
			r.nSeries--
		}
		d.mins = kept
		if len(kept) == 0 {
			delete(r.daily, k)
		}
	}
	return out
}

// dailyRow is a usage_daily row to write: its key and its pending figures
// (whose minutes are its usage_series rows).
type dailyRow struct {
	dailyKey
	*ifaceDay
}

// dailyRows are the usage_daily rows in primary-key order (app, day,
// interface), each with its figures, so that the write looks none up again.
func (r *rowset) dailyRows() []dailyRow {
	out := make([]dailyRow, 0, len(r.daily))
	for k, d := range r.daily {
		out = append(out, dailyRow{dailyKey: k, ifaceDay: d})
	}
	slices.SortFunc(out, func(a, b dailyRow) int {
		if c := strings.Compare(a.app, b.app); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.day, b.day), strings.Compare(a.iface, b.iface))
	})
	return out
}

// seriesRows are the usage_series rows of daily (in dailyRows' order) in
// primary-key order (app, t, interface), each app's sorted on its own.
func seriesRows(daily []dailyRow) []seriesRow {
	n := 0
	for _, d := range daily {
		n += len(d.mins)
	}
	out := make([]seriesRow, 0, n)
	for lo := 0; lo < len(daily); {
		hi := lo + 1
		for hi < len(daily) && daily[hi].app == daily[lo].app {
			hi++
		}
		app := out[len(out):] // the app's rows, in out's free room
		for _, d := range daily[lo:hi] {
			for _, m := range d.mins {
				app = append(app, seriesRow{app: d.app, iface: d.iface, t: m.t, Counts: m.Counts})
			}
		}
		slices.SortFunc(app, func(a, b seriesRow) int {
			return cmp.Or(cmp.Compare(a.t, b.t), strings.Compare(a.iface, b.iface))
		})
		out = out[:len(out)+len(app)]
		lo = hi
	}
	return out
}

// group returns k's user rows, made if none.
func (r *rowset) group(k userdays.AppDay) *userdays.Group {
	g := r.users[k]
	if g == nil {
		g = &userdays.Group{AppDay: k}
		r.users[k] = g
	}
	return g
}

// addUser appends a user row to g.
func (r *rowset) addUser(g *userdays.Group, row userdays.Row) {
	g.Rows = append(g.Rows, row)
	r.nUsers++
}

// userGroups returns the groups that hold rows, in write order (their rows
// unsorted: see sortGroup).
func (r *rowset) userGroups() []*userdays.Group {
	out := make([]*userdays.Group, 0, len(r.users))
	for _, g := range r.users {
		if len(g.Rows) > 0 {
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b *userdays.Group) int { return userdays.CompareAppDays(a.AppDay, b.AppDay) })
	return out
}

// sortGroup sorts g's rows into write order and sums rows of equal keys.
func (r *rowset) sortGroup(g *userdays.Group) {
	n := len(g.Rows)
	g.Rows = userdays.SortRows(g.Rows)
	r.nUsers -= n - len(g.Rows)
}

func (r *rowset) merge(o *rowset) {
	for k, od := range o.daily {
		d := r.ifaceDay(k, r.daily[k])
		for _, m := range od.mins {
			r.add(d, m.t, m.Counts)
		}
	}
	for k, og := range o.users {
		g := r.group(k)
		for _, row := range og.Rows {
			r.addUser(g, row)
		}
	}
}
