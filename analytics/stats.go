package analytics

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quota-platform/quota/analytics/usage"
	"github.com/quota-platform/quota/analytics/userdays"
	"github.com/quota-platform/quota/clock"
)

// InterfaceCounts are one interface's figures.
type InterfaceCounts struct {
	InterfaceID string
	Counts
}

// AppDayStats are an app's figures for one UTC day.
type AppDayStats struct {
	Counts
	UniqueUsers int64
	Interfaces  []InterfaceCounts // most calls first
}

// InterfaceDayStats are one interface's figures for one UTC day.
type InterfaceDayStats struct {
	Counts
	UniqueUsers int64
}

// UserDayStats are one user's figures in one app for one UTC day.
type UserDayStats struct {
	Counts
	Interfaces []InterfaceCounts // most calls first
}

// Point is one point of a call curve.
type Point struct {
	T                      int64 // Unix seconds of the point's start
	Calls, Allowed, Denied int64
}

// MaxPoints bounds a curve: a year of 1-minute points.
const MaxPoints = 366 * 24 * 60

// Stats answers the figures of the stats API and the dashboard: what
// MySQL holds plus what this instance has not written yet, read in the
// Flusher's readRows, so that a flush moving rows cannot make a call count
// twice or not at all. Other instances' calls appear once they flush them.
type Stats struct {
	clk     clock.Clock
	days    Days
	dbs     usage.Shards
	rec     *Recorder
	flusher *Flusher
	uniq    *uniques
	users   *userdays.Store
}

// Now is analytics' clock.
func (s *Stats) Now() time.Time { return s.clk.Now() }

// AppDay answers an app's figures for day.
func (s *Stats) AppDay(ctx context.Context, app string, day Day) (AppDayStats, error) {
	var out AppDayStats
	key := hllKey{app: app, scope: scopeApp, day: day}
	ifaces, users, err := s.day(ctx, key)
	if err != nil {
		return out, err
	}
	out.Counts, out.Interfaces = byInterface(ifaces)
	out.UniqueUsers, err = s.uniq.count(ctx, []hllKey{key}, users)
	return out, err
}

// InterfaceDay answers one interface's figures for day.
func (s *Stats) InterfaceDay(ctx context.Context, app, iface string, day Day) (InterfaceDayStats, error) {
	var out InterfaceDayStats
	key := hllKey{app: app, iface: iface, scope: scopeIface, day: day}
	ifaces, users, err := s.day(ctx, key)
	if err != nil {
		return out, err
	}
	out.Counts, _ = byInterface(ifaces)
	out.UniqueUsers, err = s.uniq.count(ctx, []hllKey{key}, users)
	return out, err
}

// day reads the figures of k's app (of its interface only, for an
// interface's key) on k's day by interface, and the users not yet in
// k's HyperLogLog.
func (s *Stats) day(ctx context.Context, k hllKey) (map[string]*Counts, map[hllKey][]string, error) {
	ifaces := map[string]*Counts{}
	users := map[hllKey][]string{}
	query := "SELECT interface_id, calls, allowed, denied FROM usage_daily WHERE app_id = ? AND day = ?"
	args := []any{k.app, k.day.String()}
	if k.scope == scopeIface {
		query += " AND interface_id = ?"
		args = append(args, k.iface)
	}
	err := s.flusher.readRows(func() error {
		err := scanCounts(ctx, s.dbs.Of(k.app), query, args, func(iface string, c Counts) { usage.AddTo(ifaces, iface, c) })
		if err != nil {
			return fmt.Errorf("usage_daily of %q: %w", k.app, err)
		}
		for _, rs := range s.flusher.unwritten(k.app) {
			if k.scope == scopeIface {
				if d := rs.daily[dailyKey{app: k.app, iface: k.iface, day: k.day}]; d != nil {
					usage.AddTo(ifaces, k.iface, d.Counts)
				}
				continue
			}
			for dk, d := range rs.daily {
				if dk.app == k.app && dk.day == k.day {
					usage.AddTo(ifaces, dk.iface, d.Counts)
				}
			}
		}
		seen := map[string]struct{}{}
		s.rec.scan(k.app, func(lk liveKey, c Counts) {
			_, iface, user := lk.id.Split()
			if s.days.OfUnix(lk.min) != k.day || (k.scope == scopeIface && iface != k.iface) {
				return
			}
			usage.AddTo(ifaces, iface, c)
			if _, ok := seen[user]; !ok && user != "" {
				seen[user] = struct{}{}
				users[k] = append(users[k], user)
			}
		})
		s.uniq.pending(k, k.day, users)
		return nil
	})
	return ifaces, users, err
}

// scanCounts runs query on db, whose rows are a key and calls, allowed,
// denied, and calls f with each row.
func scanCounts[K any](ctx context.Context, db *sql.DB, query string, args []any, f func(K, Counts)) error {
	return usage.EachRow(ctx, db, query, args, func(rows *sql.Rows) error {
		var k K
		var c Counts
		if err := rows.Scan(&k, &c.Calls, &c.Allowed, &c.Denied); err != nil {
			return err
		}
		f(k, c)
		return nil
	})
}

// byInterface is the total of ifaces and its interfaces, most calls first.
func byInterface(ifaces map[string]*Counts) (Counts, []InterfaceCounts) {
	var total Counts
	var out []InterfaceCounts
	for iface, c := range ifaces {
		total.Add(*c)
		out = append(out, InterfaceCounts{InterfaceID: iface, Counts: *c})
	}
	slices.SortFunc(out, func(a, b InterfaceCounts) int {
		return cmp.Or(cmp.Compare(b.Calls, a.Calls), strings.Compare(a.InterfaceID, b.InterfaceID))
	})
	return total, out
}

// UserDay answers one user's figures in app for day.
func (s *Stats) UserDay(ctx context.Context, app, user string, day Day) (UserDayStats, error) {
	var out UserDayStats
	ifaces := map[string]*Counts{}
	err := s.flusher.readRows(func() error {
		if err := s.users.Stored(ctx, s.dbs.Of(app), app, user, day, ifaces); err != nil {
			return err
		}
		for _, rs := range s.flusher.unwritten(app) {
			if g := rs.users[userdays.AppDay{App: app, Day: day}]; g != nil {
				for i := range g.Rows {
					if _, f, us := g.Rows[i].ID.Split(); us == user {
						usage.AddTo(ifaces, f, g.Rows[i].Counts)
					}
				}
			}
		}
		s.rec.scan(app, func(k liveKey, c Counts) {
			if _, f, us := k.id.Split(); us == user && s.days.OfUnix(k.min) == day {
				usage.AddTo(ifaces, f, c)
			}
		})
		return nil
	})
	if err != nil {
		return out, err
	}
	out.Counts, out.Interfaces = byInterface(ifaces)
	return out, nil
}

// SeriesQuery asks for a call curve.
type SeriesQuery struct {
	App         string
	Interface   string // with ByInterface: only this interface
	ByInterface bool
	From, To    time.Time
	Res         Resolution
}

// ErrTooManyPoints is returned for a curve of more than MaxPoints points.
var ErrTooManyPoints = errors.New("too many points")

// Points is the number of points a curve from..to at res has.
func Points(from, to time.Time, res Resolution) int64 {
	lo := res.Floor(from.Unix())
	hi := to.Unix()
	if hi <= lo {
		return 0
	}
	return (hi - lo + int64(res) - 1) / int64(res)
}

// Series answers a call curve: one point per res-wide period from the
// period holding From up to To (exclusive), zeros included. A point rolled
// up to a coarser resolution than res counts in the period of its start.
func (s *Stats) Series(ctx context.Context, q SeriesQuery) ([]Point, error) {
	n := Points(q.From, q.To, q.Res)
	if n > MaxPoints {
		return nil, fmt.Errorf("%w: %d points of %s from %s to %s (at most %d)", ErrTooManyPoints, n, q.Res, q.From.Format(time.RFC3339), q.To.Format(time.RFC3339), MaxPoints)
	}
	lo := q.Res.Floor(q.From.Unix())
	hi := q.To.Unix()
	pts := make([]Point, n)
	for i := range pts {
		pts[i].T = lo + int64(i)*int64(q.Res)
	}
	if n == 0 {
		return pts, nil
	}
	add := func(t int64, c Counts) {
		if t < lo || t >= hi {
			return
		}
		p := &pts[(q.Res.Floor(t)-lo)/int64(q.Res)]
		p.Calls += c.Calls
		p.Allowed += c.Allowed
		p.Denied += c.Denied
	}
	query := "SELECT t, SUM(calls), SUM(allowed), SUM(denied) FROM usage_series WHERE app_id = ? AND res IN (60, 300, 3600, 604800) AND t >= ? AND t < ?"
	args := []any{q.App, lo, hi}
	if q.ByInterface {
		query += " AND interface_id = ?"
		args = append(args, q.Interface)
	}
	err := s.flusher.readRows(func() error {
		if err := scanCounts(ctx, s.dbs.Of(q.App), query+" GROUP BY res, t", args, add); err != nil {
			return fmt.Errorf("usage_series of %q: %w", q.App, err)
		}
		for _, rs := range s.flusher.unwritten(q.App) {
			for k, d := range rs.daily {
				if k.app == q.App && (!q.ByInterface || k.iface == q.Interface) {
					for _, m := range d.mins {
						add(m.t, m.Counts)
					}
				}
			}
		}
		s.rec.scan(q.App, func(k liveKey, c Counts) {
			if !q.ByInterface || k.id.Iface() == q.Interface {
				add(k.min, c)
			}
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return pts, nil
}

// Uniques is the number of distinct users of app over the days from..to
// (inclusive), merging the daily HyperLogLogs.
func (s *Stats) Uniques(ctx context.Context, app string, from, to Day) (int64, error) {
	if to < from {
		return 0, nil
	}
	var keys []hllKey
	extra := map[hllKey][]string{}
	for d := from; d <= to; d++ {
		keys = append(keys, hllKey{app: app, scope: scopeApp, day: d})
	}
	_ = s.flusher.readRows(func() error {
		s.uniq.pending(hllKey{app: app, scope: scopeApp, day: from}, to, extra)
		s.rec.scan(app, func(k liveKey, _ Counts) {
			d := s.days.OfUnix(k.min)
			if user := k.id.User(); user != "" && d >= from && d <= to {
				hk := hllKey{app: app, scope: scopeApp, day: d}
				extra[hk] = append(extra[hk], user)
			}
		})
		return nil
	})
	return s.uniq.count(ctx, keys, extra)
}

// Apps lists the apps that had calls in the last 31 days, in order (at
// most limit).
func (s *Stats) Apps(ctx context.Context, limit int) ([]string, error) {
	set := map[string]struct{}{}
	since := (s.Today() - 31).String()
	for i, db := range s.dbs {
		err := usage.EachRow(ctx, db, "SELECT DISTINCT app_id FROM usage_daily WHERE day >= ?", []any{since}, func(rows *sql.Rows) error {
			var a string
			if err := rows.Scan(&a); err != nil {
				return err
			}
			set[a] = struct{}{}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("apps of shard %d: %w", i, err)
		}
	}
	s.flusher.unwrittenApps(set)
	s.rec.apps(set)
	out := make([]string, 0, len(set))
	for a := range set {
		out = append(out, a)
	}
	slices.Sort(out)
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Today is the analytics day of now, in the analytics' time zone.
func (s *Stats) Today() Day { return s.days.Of(s.clk.Now()) }
