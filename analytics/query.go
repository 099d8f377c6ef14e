package analytics

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
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

// Now is the recorder's clock.
func (r *Recorder) Now() time.Time { return r.clk.Now() }

// Every figure below is what MySQL holds plus what this instance has not
// written yet (live aggregates, pending and uncertain rows), read under
// r.mu so that a flush moving rows cannot make a call count twice or not at
// all. Figures of calls recorded by other quotad instances appear once they
// have flushed them (within QUOTA_ANALYTICS_FLUSH; day and curve figures of
// a minute held back by Options.HoldOpenMinute within a flush after the
// minute).

// scanLive calls f for each live aggregate of app (under its shard's lock).
func (r *Recorder) scanLive(app string, f func(k liveKey, c Counts)) { r.live.scan(app, f) }

// rowsets are the shard's rows not known to be in MySQL (caller holds r.mu).
func (r *Recorder) rowsets(app string) []*rowset {
	return r.shards[ShardIndex(app, len(r.shards))].unwritten()
}

func (r *Recorder) db(app string) *dbShard { return r.shards[ShardIndex(app, len(r.shards))] }

// pendingUsers adds to extra the users not yet in Redis of the keys like k
// from k.day to last (caller holds r.mu).
func (r *Recorder) pendingUsers(k hllKey, last Day, extra map[hllKey][]string) {
	for i := range r.hllQueue {
		a := &r.hllQueue[i]
		if a.id.app() != k.app || a.day < k.day || a.day > last || (k.scope == scopeIface && a.id.iface() != k.iface) {
			continue
		}
		dk := k
		dk.day = a.day
		extra[dk] = append(extra[dk], a.id.user())
	}
	if k.scope == scopeIface {
		r.pendingIfaceUsers(k, last, extra)
	}
}

// AppDay answers an app's figures for day.
func (r *Recorder) AppDay(ctx context.Context, app string, day Day) (AppDayStats, error) {
	var out AppDayStats
	ifaces := map[string]*Counts{}
	appKey := hllKey{app: app, scope: scopeApp, day: day}
	extra := map[hllKey][]string{}
	err := func() error {
		r.mu.RLock()
		defer r.mu.RUnlock()
		rows, err := r.db(app).db.QueryContext(ctx,
			"SELECT interface_id, calls, allowed, denied FROM usage_daily WHERE app_id = ? AND day = ?", app, day.String())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var iface string
			var c Counts
			if err := rows.Scan(&iface, &c.Calls, &c.Allowed, &c.Denied); err != nil {
				return err
			}
			addTo(ifaces, iface, c)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, rs := range r.rowsets(app) {
			for k, d := range rs.daily {
				if k.app == app && k.day == day {
					addTo(ifaces, k.iface, d.Counts)
				}
			}
		}
		seen := map[string]struct{}{}
		r.scanLive(app, func(k liveKey, c Counts) {
			if Day(floorDiv(k.min, 86400)) != day {
				return
			}
			_, iface, user := k.id.split()
			addTo(ifaces, iface, c)
			if _, ok := seen[user]; !ok && user != "" {
				seen[user] = struct{}{}
				extra[appKey] = append(extra[appKey], user)
			}
		})
		r.pendingUsers(appKey, appKey.day, extra)
		return nil
	}()
	if err != nil {
		return out, err
	}
	for iface, c := range ifaces {
		out.Counts.add(*c)
		out.Interfaces = append(out.Interfaces, InterfaceCounts{InterfaceID: iface, Counts: *c})
	}
	sortInterfaces(out.Interfaces)
	out.UniqueUsers, err = r.uniqueCount(ctx, []hllKey{appKey}, extra)
	return out, err
}

func sortInterfaces(l []InterfaceCounts) {
	slices.SortFunc(l, func(a, b InterfaceCounts) int {
		return cmp.Or(cmp.Compare(b.Calls, a.Calls), strings.Compare(a.InterfaceID, b.InterfaceID))
	})
}

// InterfaceDay answers one interface's figures for day.
func (r *Recorder) InterfaceDay(ctx context.Context, app, iface string, day Day) (InterfaceDayStats, error) {
	var out InterfaceDayStats
	key := hllKey{app: app, iface: iface, scope: scopeIface, day: day}
	extra := map[hllKey][]string{}
	err := func() error {
		r.mu.RLock()
		defer r.mu.RUnlock()
		var c Counts
		err := r.db(app).db.QueryRowContext(ctx,
			"SELECT COALESCE(SUM(calls),0), COALESCE(SUM(allowed),0), COALESCE(SUM(denied),0) FROM usage_daily WHERE app_id = ? AND day = ? AND interface_id = ?",
			app, day.String(), iface).Scan(&c.Calls, &c.Allowed, &c.Denied)
		if err != nil {
			return err
		}
		out.Counts = c
		for _, rs := range r.rowsets(app) {
			if d := rs.daily[dailyKey{app: app, iface: iface, day: day}]; d != nil {
				out.Counts.add(d.Counts)
			}
		}
		r.scanLive(app, func(k liveKey, c Counts) {
			if k.id.iface() == iface && Day(floorDiv(k.min, 86400)) == day {
				out.Counts.add(c)
				if user := k.id.user(); user != "" {
					extra[key] = append(extra[key], user)
				}
			}
		})
		r.pendingUsers(key, key.day, extra)
		return nil
	}()
	if err != nil {
		return out, err
	}
	out.UniqueUsers, err = r.uniqueCount(ctx, []hllKey{key}, extra)
	return out, err
}

// UserDay answers one user's figures in app for day.
func (r *Recorder) UserDay(ctx context.Context, app, user string, day Day) (UserDayStats, error) {
	var out UserDayStats
	ifaces := map[string]*Counts{}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if err := r.userDayStored(ctx, app, user, day, ifaces); err != nil {
		return out, err
	}
	for _, rs := range r.rowsets(app) {
		if g := rs.users[appDay{app: app, day: day}]; g != nil {
			for i := range g.rows {
				if _, f, us := g.rows[i].id.split(); us == user {
					addTo(ifaces, f, g.rows[i].Counts)
				}
			}
		}
	}
	r.scanLive(app, func(k liveKey, c Counts) {
		if _, f, us := k.id.split(); us == user && Day(floorDiv(k.min, 86400)) == day {
			addTo(ifaces, f, c)
		}
	})
	for iface, c := range ifaces {
		out.Counts.add(*c)
		out.Interfaces = append(out.Interfaces, InterfaceCounts{InterfaceID: iface, Counts: *c})
	}
	sortInterfaces(out.Interfaces)
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
func (r *Recorder) Series(ctx context.Context, q SeriesQuery) ([]Point, error) {
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
	r.mu.RLock()
	defer r.mu.RUnlock()
	query := "SELECT t, SUM(calls), SUM(allowed), SUM(denied) FROM usage_series WHERE app_id = ? AND res IN (60, 300, 3600, 604800) AND t >= ? AND t < ?"
	args := []any{q.App, lo, hi}
	if q.ByInterface {
		query += " AND interface_id = ?"
		args = append(args, q.Interface)
	}
	rows, err := r.db(q.App).db.QueryContext(ctx, query+" GROUP BY res, t", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var t int64
		var c Counts
		if err := rows.Scan(&t, &c.Calls, &c.Allowed, &c.Denied); err != nil {
			return nil, err
		}
		add(t, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, rs := range r.rowsets(q.App) {
		for k, d := range rs.daily {
			if k.app == q.App && (!q.ByInterface || k.iface == q.Interface) {
				for _, m := range d.mins {
					add(m.t, m.Counts)
				}
			}
		}
	}
	r.scanLive(q.App, func(k liveKey, c Counts) {
		if !q.ByInterface || k.id.iface() == q.Interface {
			add(k.min, c)
		}
	})
	return pts, nil
}

// Uniques is the number of distinct users of app over the days from..to
// (inclusive), merging the daily HyperLogLogs.
func (r *Recorder) Uniques(ctx context.Context, app string, from, to Day) (int64, error) {
	if to < from {
		return 0, nil
	}
	var keys []hllKey
	extra := map[hllKey][]string{}
	r.mu.RLock()
	for d := from; d <= to; d++ {
		keys = append(keys, hllKey{app: app, scope: scopeApp, day: d})
	}
	r.pendingUsers(hllKey{app: app, scope: scopeApp, day: from}, to, extra)
	r.scanLive(app, func(k liveKey, _ Counts) {
		d := Day(floorDiv(k.min, 86400))
		if user := k.id.user(); user != "" && d >= from && d <= to {
			hk := hllKey{app: app, scope: scopeApp, day: d}
			extra[hk] = append(extra[hk], user)
		}
	})
	r.mu.RUnlock()
	return r.uniqueCount(ctx, keys, extra)
}

// Apps lists the apps that had calls in the last 31 days, in order (at
// most limit).
func (r *Recorder) Apps(ctx context.Context, limit int) ([]string, error) {
	set := map[string]struct{}{}
	since := (DayOf(r.clk.Now()) - 31).String()
	for _, sh := range r.shards {
		rows, err := sh.db.QueryContext(ctx,
			"SELECT DISTINCT app_id FROM usage_daily WHERE day >= ?", since)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var a string
			if err := rows.Scan(&a); err != nil {
				rows.Close()
				return nil, err
			}
			set[a] = struct{}{}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	r.mu.RLock()
	for _, sh := range r.shards {
		for _, rs := range sh.unwritten() {
			for k := range rs.daily {
				set[k.app] = struct{}{}
			}
		}
	}
	r.mu.RUnlock()
	r.live.apps(set)
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

// userDayStatement is userDayStored's statement and its arguments: the
// rows of usage_user_daily, then the chunks of each chunk table that may
// hold user (partsOf).
func userDayStatement(app, user string, day Day) (string, []any) {
	d := day.String()
	q := "SELECT interface_id, calls, allowed, denied, NULL FROM usage_user_daily WHERE app_id = ? AND user_id = ? AND day = ?"
	args := []any{app, user, d}
	parts := partsOf(user)
	in := strings.TrimSuffix(strings.Repeat("?, ", len(parts)), ", ")
	for _, t := range []chunkTable{todayChunks, sealedChunks} {
		q += "\nUNION ALL\nSELECT '', 0, 0, 0, body FROM " + t.name + " WHERE day = ? AND app_id = ? AND part IN (" + in + ")"
		args = append(args, d, app)
		for _, p := range parts {
			args = append(args, p)
		}
	}
	return q, args
}

// userDayStored adds user's stored figures for day to ifaces: the entries
// of the day's chunks (userchunk.go) and of its sealed chunks
// (userseal.go), and the rows of usage_user_daily (where versions before
// the seal folded finished days). One statement, so one snapshot: a seal
// that commits meanwhile moves entries between the chunk tables, and two
// statements could see them in neither or in both.
func (r *Recorder) userDayStored(ctx context.Context, app, user string, day Day, ifaces map[string]*Counts) error {
	q, args := userDayStatement(app, user, day)
	rows, err := r.db(app).db.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var iface string
		var c Counts
		var body []byte
		if err := rows.Scan(&iface, &c.Calls, &c.Allowed, &c.Denied, &body); err != nil {
			return err
		}
		if body == nil {
			addTo(ifaces, iface, c)
			continue
		}
		err := eachUserEntry(body, func(u, f string, c Counts) {
			if u == user {
				addTo(ifaces, f, c)
			}
		})
		if err != nil {
			return fmt.Errorf("user chunk of %s on %s: %w", app, day, err)
		}
	}
	return rows.Err()
}
