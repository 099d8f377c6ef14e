package analytics_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/analytics"
	"github.com/quota-platform/quota/analytics/usage"
	"github.com/quota-platform/quota/internal/testsupport/analyticsenv"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

var t0 = analyticsenv.T0

// env is the shared analytics test environment, with this package's helpers.
type env struct{ *analyticsenv.Env }

func newEnv(t *testing.T, shards int, mod func(*analytics.Options)) *env {
	t.Helper()
	return &env{analyticsenv.New(t, shards, mod)}
}

func (e *env) flush() {
	e.T.Helper()
	if err := e.Rec.Flusher.Flush(context.Background()); err != nil {
		e.T.Fatalf("flush: %v", err)
	}
}

func (e *env) metric(name string, labels ...string) float64 {
	e.T.Helper()
	mfs, err := e.Reg.Gather()
	if err != nil {
		e.T.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				ok := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						ok = true
					}
				}
				if !ok {
					continue metrics
				}
			}
			switch {
			case m.Counter != nil:
				total += m.Counter.GetValue()
			case m.Gauge != nil:
				total += m.Gauge.GetValue()
			case m.Histogram != nil:
				total += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return total
}

func day(t time.Time) analytics.Day { return analytics.DayOf(t) }

// mix records a known set of calls and returns what each app/interface/user
// must show for day(t0).
type expect struct {
	app   map[string]analytics.Counts
	iface map[[2]string]analytics.Counts
	user  map[[3]string]analytics.Counts // app, user, iface
	users map[string]map[string]bool
	// ifaceUsers are the distinct users of each app and interface.
	ifaceUsers map[[2]string]map[string]bool
}

func recordMix(e *env) expect {
	x := expect{app: map[string]analytics.Counts{}, iface: map[[2]string]analytics.Counts{},
		user: map[[3]string]analytics.Counts{}, users: map[string]map[string]bool{},
		ifaceUsers: map[[2]string]map[string]bool{}}
	apps := []string{"alpha", "beta", "gamma:with|odd chars"}
	ifaces := []string{"users.get", "orders.list", ""}
	for m := 0; m < 5; m++ { // five minutes
		for ai, a := range apps {
			for ii, it := range ifaces {
				for u := 0; u < 4+ai; u++ {
					user := fmt.Sprintf("u%d", u)
					n := 1 + (m+ai+ii+u)%3
					for k := 0; k < n; k++ {
						allowed := (k+u)%4 != 0
						e.Rec.Recorder.Record(a, it, user, allowed)
						add := analytics.Counts{Calls: 1}
						if allowed {
							add.Allowed = 1
						} else {
							add.Denied = 1
						}
						c := x.app[a]
						c.Calls, c.Allowed, c.Denied = c.Calls+add.Calls, c.Allowed+add.Allowed, c.Denied+add.Denied
						x.app[a] = c
						c = x.iface[[2]string{a, it}]
						c.Calls, c.Allowed, c.Denied = c.Calls+add.Calls, c.Allowed+add.Allowed, c.Denied+add.Denied
						x.iface[[2]string{a, it}] = c
						c = x.user[[3]string{a, user, it}]
						c.Calls, c.Allowed, c.Denied = c.Calls+add.Calls, c.Allowed+add.Allowed, c.Denied+add.Denied
						x.user[[3]string{a, user, it}] = c
						if x.users[a] == nil {
							x.users[a] = map[string]bool{}
						}
						x.users[a][user] = true
						if x.ifaceUsers[[2]string{a, it}] == nil {
							x.ifaceUsers[[2]string{a, it}] = map[string]bool{}
						}
						x.ifaceUsers[[2]string{a, it}][user] = true
					}
				}
			}
		}
		e.Clk.Advance(time.Minute)
	}
	return x
}

func checkMix(t *testing.T, e *env, x expect, when string) {
	t.Helper()
	ctx := context.Background()
	for a, want := range x.app {
		got, err := e.Rec.Stats.AppDay(ctx, a, day(t0))
		if err != nil {
			t.Fatal(err)
		}
		if got.Counts != want || got.UniqueUsers != int64(len(x.users[a])) {
			t.Errorf("%s: app %q = %+v unique %d, want %+v unique %d", when, a, got.Counts, got.UniqueUsers, want, len(x.users[a]))
		}
		if len(got.Interfaces) != 3 {
			t.Errorf("%s: app %q has %d interfaces, want 3", when, a, len(got.Interfaces))
		}
		for _, ic := range got.Interfaces {
			if ic.Counts != x.iface[[2]string{a, ic.InterfaceID}] {
				t.Errorf("%s: %q/%q = %+v, want %+v", when, a, ic.InterfaceID, ic.Counts, x.iface[[2]string{a, ic.InterfaceID}])
			}
		}
	}
	for k, want := range x.iface {
		got, err := e.Rec.Stats.InterfaceDay(ctx, k[0], k[1], day(t0))
		if err != nil {
			t.Fatal(err)
		}
		if got.Counts != want || got.UniqueUsers != int64(len(x.ifaceUsers[k])) {
			t.Errorf("%s: interface %q = %+v unique %d, want %+v unique %d", when, k, got.Counts, got.UniqueUsers,
				want, len(x.ifaceUsers[k]))
		}
	}
	for k, want := range x.user {
		got, err := e.Rec.Stats.UserDay(ctx, k[0], k[1], day(t0))
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, ic := range got.Interfaces {
			if ic.InterfaceID == k[2] {
				found = true
				if ic.Counts != want {
					t.Errorf("%s: user %q = %+v, want %+v", when, k, ic.Counts, want)
				}
			}
		}
		if !found {
			t.Errorf("%s: user %q: interface missing in %+v", when, k, got)
		}
	}
	// The curve: five 1-minute points summing to the app's totals.
	for a, want := range x.app {
		pts, err := e.Rec.Stats.Series(ctx, analytics.SeriesQuery{App: a, From: t0, To: t0.Add(5 * time.Minute), Res: analytics.Res1m})
		if err != nil {
			t.Fatal(err)
		}
		var sum analytics.Counts
		nonzero := 0
		for _, p := range pts {
			sum.Calls += p.Calls
			sum.Allowed += p.Allowed
			sum.Denied += p.Denied
			if p.Calls > 0 {
				nonzero++
			}
		}
		if sum != want || nonzero != 5 {
			t.Errorf("%s: series of %q sums to %+v over %d points, want %+v over 5", when, a, sum, nonzero, want)
		}
	}
}

func TestExactBeforeAndAfterFlush(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, nil)
	x := recordMix(e)
	checkMix(t, e, x, "in memory")
	e.flush()
	checkMix(t, e, x, "flushed")
	e.flush() // nothing new: nothing changes
	checkMix(t, e, x, "flushed twice")
	if w := e.metric("quota_analytics_rows_written_total"); w == 0 {
		t.Fatal("no rows written")
	}
}

func TestUniqueUsersWithin2Percent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	const n = 100_000
	for u := 0; u < n; u++ {
		e.Rec.Recorder.Record("big", fmt.Sprintf("if%d", u%2), fmt.Sprintf("user-%d", u), true)
	}
	e.flush()
	ctx := context.Background()
	got, err := e.Rec.Stats.AppDay(ctx, "big", day(t0))
	if err != nil {
		t.Fatal(err)
	}
	if d := math.Abs(float64(got.UniqueUsers-n)) / n; d > 0.02 {
		t.Fatalf("unique users %d, want %d within 2%% (off by %.2f%%)", got.UniqueUsers, n, 100*d)
	}
	ic, err := e.Rec.Stats.InterfaceDay(ctx, "big", "if0", day(t0))
	if err != nil {
		t.Fatal(err)
	}
	if d := math.Abs(float64(ic.UniqueUsers-n/2)) / (n / 2); d > 0.02 {
		t.Fatalf("unique users of if0 %d, want %d within 2%%", ic.UniqueUsers, n/2)
	}
	t.Logf("100,000 users counted as %d (%.2f%% off)", got.UniqueUsers, 100*math.Abs(float64(got.UniqueUsers-n))/n)
}

// Redis losing the day's key must not lose the day's distinct users once
// the registers were saved; days merge into a weekly count.
func TestUniquesSurviveRedisLossAndMergeOverDays(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	ctx := context.Background()
	// Day 1: users 0..999; day 2: users 500..1499.
	for u := 0; u < 1000; u++ {
		e.Rec.Recorder.Record("app", "i", fmt.Sprintf("u%d", u), true)
	}
	e.flush()
	e.Clk.Advance(24 * time.Hour)
	for u := 500; u < 1500; u++ {
		e.Rec.Recorder.Record("app", "i", fmt.Sprintf("u%d", u), true)
	}
	if err := e.Rec.Flusher.Close(ctx); err != nil { // saves every touched key
		t.Fatal(err)
	}
	testenv.DeletePrefix(ctx, e.RDB, e.Prefix) // Redis loses everything
	e.Rec = e.Open(nil)
	for d, want := range map[analytics.Day]int64{day(t0): 1000, day(t0) + 1: 1000} {
		got, err := e.Rec.Stats.AppDay(ctx, "app", d)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(float64(got.UniqueUsers-want))/float64(want) > 0.02 {
			t.Errorf("day %s: %d unique users after Redis lost the key, want ~%d", d, got.UniqueUsers, want)
		}
		ic, err := e.Rec.Stats.InterfaceDay(ctx, "app", "i", d)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(float64(ic.UniqueUsers-want))/float64(want) > 0.02 {
			t.Errorf("day %s: interface: %d unique users, want ~%d", d, ic.UniqueUsers, want)
		}
	}
	week, err := e.Rec.Stats.Uniques(ctx, "app", day(t0), day(t0)+6)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(float64(week-1500))/1500 > 0.02 {
		t.Errorf("distinct users over the week = %d, want ~1500", week)
	}
	// A new user today lands in Redis again, on top of the restored registers.
	e.Rec.Recorder.Record("app", "i", "brand-new", true)
	e.flush()
	got, _ := e.Rec.Stats.AppDay(ctx, "app", day(t0)+1)
	if got.UniqueUsers < 990 {
		t.Errorf("after a new call the restored day shows %d users", got.UniqueUsers)
	}
}

// A shutdown persists every touched HyperLogLog: 1,010 of them (10 apps ×
// 100 interfaces, and the 10 apps) go out in a handful of multi-row
// statements, not one per key, and each comes back intact after Redis loses
// them all, merged with what an earlier persist had saved.
func TestFinalPersistBatchesHyperLogLogs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, nil)
	ctx := context.Background()
	const apps, ifaces = 10, 100
	users := func(a, f int) int { return 1 + (a*ifaces+f)%40 }
	for a := 0; a < apps; a++ {
		for f := 0; f < ifaces; f++ {
			for u := 0; u < users(a, f); u++ {
				e.Rec.Recorder.Record(fmt.Sprintf("app%d", a), fmt.Sprintf("if%d", f), fmt.Sprintf("u%d", u), true)
			}
		}
	}
	e.flush() // persists the app-level keys (due at the first flush)
	// One more user on every interface after the app-level persist.
	for a := 0; a < apps; a++ {
		for f := 0; f < ifaces; f++ {
			e.Rec.Recorder.Record(fmt.Sprintf("app%d", a), fmt.Sprintf("if%d", f), "late", true)
		}
	}
	if err := e.Rec.Flusher.Close(ctx); err != nil {
		t.Fatal(err)
	}
	statements := e.metric("quota_analytics_statements_total", "table", "usage_uniques")
	rows := e.metric("quota_analytics_rows_written_total", "table", "usage_uniques")
	t.Logf("usage_uniques: %v statements, %v rows", statements, rows)
	// 10 app keys in the first flush (≤ 1 statement per shard); 1,010 keys at
	// shutdown: ≤ ceil(keys on the shard / 200) per shard.
	if statements > 2+(apps*ifaces+apps)/200+2 {
		t.Fatalf("%v statements for %d keys", statements, apps*ifaces+2*apps)
	}
	testenv.DeletePrefix(ctx, e.RDB, e.Prefix) // Redis loses everything
	e.Rec = e.Open(nil)
	for _, c := range [][2]int{{0, 0}, {3, 17}, {9, 99}} {
		a, f := c[0], c[1]
		got, err := e.Rec.Stats.InterfaceDay(ctx, fmt.Sprintf("app%d", a), fmt.Sprintf("if%d", f), day(t0))
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(users(a, f) + 1); got.UniqueUsers != want {
			t.Errorf("app%d if%d: %d unique users after Redis lost the key, want %d", a, f, got.UniqueUsers, want)
		}
	}
	got, err := e.Rec.Stats.AppDay(ctx, "app3", day(t0))
	if err != nil {
		t.Fatal(err)
	}
	if got.UniqueUsers != 41 { // u0..u39 and "late"
		t.Errorf("app3: %d unique users, want 41", got.UniqueUsers)
	}
}

// 200,000 calls over 100 (app, interface) pairs in 10 flushes write a
// number of statements bounded by flushes × pairs / rows-per-statement.
func TestWritesBoundedByPairsNotCalls(t *testing.T) {
	t.Parallel()
	const rowsPer = 50
	e := newEnv(t, 2, func(o *analytics.Options) { o.RowsPerStatement = rowsPer })
	const calls, flushes, apps, ifaces, users = 200_000, 10, 10, 10, 20
	var app3Denied int64
	for i := 0; i < calls; i++ {
		a := i % apps
		f := (i / apps) % ifaces
		if a == 3 && i%7 == 0 {
			app3Denied++
		}
		e.Rec.Recorder.Record(fmt.Sprintf("app%d", a), fmt.Sprintf("if%d", f), fmt.Sprintf("u%d", (i/100)%users), i%7 != 0)
		if (i+1)%(calls/flushes) == 0 {
			e.Clk.Advance(15 * time.Second)
			e.flush()
		}
	}
	pairs := apps * ifaces
	shards := len(e.DBs)
	// Per flush and shard: ceil(rows / rowsPer) statements, rows ≤ pairs
	// (series: one minute at most twice per flush here; daily: pairs).
	ceil := func(a, b int) int { return (a + b - 1) / b }
	maxSeries := flushes * (ceil(2*pairs, rowsPer) + shards)
	maxDaily := flushes * (ceil(pairs, rowsPer) + shards)
	// Per-user figures: one chunk per app and flush (≤ 200 entries an app
	// here, so one part each), not one row per (user, interface).
	maxUsers := flushes * (ceil(apps, rowsPer) + shards)
	gotSeries := e.metric("quota_analytics_statements_total", "table", "usage_series")
	gotDaily := e.metric("quota_analytics_statements_total", "table", "usage_daily")
	gotUsers := e.metric("quota_analytics_statements_total", "table", "usage_user_chunks")
	rows := e.metric("quota_analytics_rows_written_total")
	t.Logf("%d calls, %d pairs, %d flushes: statements series=%v daily=%v users=%v, rows=%v",
		calls, pairs, flushes, gotSeries, gotDaily, gotUsers, rows)
	if gotSeries > float64(maxSeries) || gotDaily > float64(maxDaily) || gotUsers > float64(maxUsers) {
		t.Fatalf("statements series=%v daily=%v users=%v, want at most %d, %d, %d", gotSeries, gotDaily, gotUsers, maxSeries, maxDaily, maxUsers)
	}
	if total := gotSeries + gotDaily + gotUsers; total > calls/100 {
		t.Fatalf("%v statements for %d calls", total, calls)
	}
	got, err := e.Rec.Stats.AppDay(context.Background(), "app3", day(t0))
	if err != nil {
		t.Fatal(err)
	}
	if got.Calls != calls/apps || got.Denied != app3Denied {
		t.Fatalf("app3 = %+v, want %d calls, %d denied", got.Counts, calls/apps, app3Denied)
	}
}

// A flush that fails half-way (one table missing) commits nothing, keeps its
// rows and writes them once the table is back: nothing is counted twice.
func TestFailedFlushRetriesWithoutDoubleCount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	ctx := context.Background()
	for i := 0; i < 1000; i++ {
		e.Rec.Recorder.Record("app", fmt.Sprintf("if%d", i%7), fmt.Sprintf("u%d", i%13), i%3 != 0)
	}
	if _, err := e.DBs[0].Exec("RENAME TABLE usage_user_chunks TO usage_user_chunks_gone"); err != nil {
		t.Fatal(err)
	}
	if err := e.Rec.Flusher.Flush(ctx); err == nil {
		t.Fatal("flush succeeded without usage_user_chunks")
	}
	var n int
	_ = e.DBs[0].QueryRow("SELECT COUNT(*) FROM usage_series").Scan(&n)
	if n != 0 {
		t.Fatalf("a failed flush left %d series rows committed", n)
	}
	got, err := e.Rec.Stats.AppDay(ctx, "app", day(t0))
	if err != nil || got.Calls != 1000 {
		t.Fatalf("while MySQL fails: %+v %v, want 1000 calls (from memory)", got.Counts, err)
	}
	for i := 0; i < 500; i++ {
		e.Rec.Recorder.Record("app", "if0", "u0", true)
	}
	if _, err := e.DBs[0].Exec("RENAME TABLE usage_user_chunks_gone TO usage_user_chunks"); err != nil {
		t.Fatal(err)
	}
	e.flush()
	e.flush()
	got, err = e.Rec.Stats.AppDay(ctx, "app", day(t0))
	if err != nil || got.Calls != 1500 || got.Denied != 334 {
		t.Fatalf("after the retry: %+v %v, want 1500 calls, 334 denied", got.Counts, err)
	}
	if e.metric("quota_analytics_flush_errors_total") != 1 {
		t.Fatalf("flush errors = %v, want 1", e.metric("quota_analytics_flush_errors_total"))
	}
}

// With MySQL unreachable pending rows stay bounded: past the maximum calls
// are dropped and counted.
func TestPendingRowsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, func(o *analytics.Options) { o.MaxPendingRows = 300; o.LiveShards = 1 })
	if _, err := e.DBs[0].Exec("RENAME TABLE usage_series TO usage_series_gone"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		e.Rec.Recorder.Record("app", "if", fmt.Sprintf("u%d", i), true)
	}
	_ = e.Rec.Flusher.Flush(context.Background())
	if pend := e.metric("quota_analytics_pending_rows"); pend > 300 {
		t.Fatalf("pending rows %v > 300", pend)
	}
	dropped := e.metric("quota_analytics_dropped_total")
	if dropped < 600 {
		t.Fatalf("dropped %v calls, want ≥ 600", dropped)
	}
	if _, err := e.DBs[0].Exec("RENAME TABLE usage_series_gone TO usage_series"); err != nil {
		t.Fatal(err)
	}
	e.flush()
	got, _ := e.Rec.Stats.AppDay(context.Background(), "app", day(t0))
	if got.Calls+int64(dropped) != 1000 {
		t.Fatalf("kept %d + dropped %v calls, want 1000", got.Calls, dropped)
	}
}

// A shard that hangs (a table locked by another session) does not hold back
// the rows of the other shard: they are written in the same flush, and the
// hung shard's rows follow, once, when it answers again.
func TestFlushWritesShardsIndependently(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, nil)
	apps := [2]string{}
	for i := 0; apps[0] == "" || apps[1] == ""; i++ {
		a := fmt.Sprintf("app%d", i)
		if apps[analytics.ShardIndex(a, 2)] == "" {
			apps[analytics.ShardIndex(a, 2)] = a
		}
	}
	ctx := context.Background()
	lock, err := e.DBs[0].Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(ctx, "LOCK TABLES usage_series WRITE"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		e.Rec.Recorder.Record(apps[0], "if", fmt.Sprintf("u%d", i), true)
		e.Rec.Recorder.Record(apps[1], "if", fmt.Sprintf("u%d", i), true)
	}
	fctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := e.Rec.Flusher.Flush(fctx); err == nil {
		t.Fatal("the flush succeeded with shard 0 locked")
	}
	calls := func(shard int, app string) int64 {
		var n sql.NullInt64
		if err := e.DBs[shard].QueryRowContext(ctx, "SELECT SUM(calls) FROM usage_daily WHERE app_id = ?", app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n.Int64
	}
	if got := calls(1, apps[1]); got != 50 {
		t.Fatalf("shard 1 holds %d calls of %s while shard 0 hung, want 50", got, apps[1])
	}
	if _, err := lock.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
		t.Fatal(err)
	}
	e.flush()
	if a, b := calls(0, apps[0]), calls(1, apps[1]); a != 50 || b != 50 {
		t.Fatalf("after the shard answered: %d and %d calls, want 50 and 50", a, b)
	}
}

// Close flushes: a new Recorder (a restarted quotad) shows every call.
func TestCloseFlushesPending(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, nil)
	ctx := context.Background()
	go e.Rec.Flusher.Run(ctx)
	for i := 0; i < 777; i++ {
		e.Rec.Recorder.Record(fmt.Sprintf("app%d", i%3), "if", fmt.Sprintf("u%d", i%50), i%7 != 0)
	}
	if err := e.Rec.Flusher.Close(ctx); err != nil {
		t.Fatal(err)
	}
	e.Rec = e.Open(nil)
	var total int64
	for a := 0; a < 3; a++ {
		got, err := e.Rec.Stats.AppDay(ctx, fmt.Sprintf("app%d", a), day(t0))
		if err != nil {
			t.Fatal(err)
		}
		total += got.Calls
		if got.UniqueUsers == 0 {
			t.Errorf("app%d: no unique users after restart", a)
		}
	}
	if total != 777 {
		t.Fatalf("after Close and reopen: %d calls, want 777", total)
	}
}

// Run's flushes hold the minute in progress (HoldOpenMinute); Close writes
// it.
func TestClose_WritesTheHeldMinute(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, func(o *analytics.Options) {
		o.HoldOpenMinute = true
		o.FlushEvery = 10 * time.Millisecond
	})
	ctx := context.Background()
	for i := 0; i < 300; i++ {
		e.Rec.Recorder.Record("app", fmt.Sprintf("if%d", i%3), fmt.Sprintf("u%d", i%20), true)
	}
	go e.Rec.Flusher.Run(ctx)
	for deadline := time.Now().Add(10 * time.Second); e.metric("quota_analytics_flush_seconds") < 3; {
		if time.Now().After(deadline) {
			t.Fatal("Run did not flush three times in 10 s")
		}
		time.Sleep(5 * time.Millisecond) // Run's ticker is real time
	}
	dailyCalls := func() (n int64) {
		t.Helper()
		if err := e.DBs[0].QueryRow("SELECT COALESCE(SUM(calls), 0) FROM usage_daily").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := dailyCalls(); n != 0 {
		t.Fatalf("Run's flushes wrote %d calls of the minute in progress", n)
	}
	if n := e.metric("quota_analytics_rows_written_total", "table", "usage_user_chunks"); n == 0 {
		t.Fatal("Run's flushes held the per-user figures too")
	}
	if err := e.Rec.Flusher.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := dailyCalls(); n != 300 {
		t.Fatalf("after Close usage_daily holds %d calls, want 300", n)
	}
}

func seriesTable(t *testing.T, db *sql.DB) string {
	t.Helper()
	rows, err := db.Query("SELECT app_id, res, t, interface_id, calls, allowed, denied FROM usage_series ORDER BY app_id, res, t, interface_id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var a, i string
		var res, ts, c, al, d int64
		if err := rows.Scan(&a, &res, &ts, &i, &c, &al, &d); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %d %d %s %d %d %d\n", a, res, ts, i, c, al, d)
	}
	return b.String()
}

// Retention: calls spread over 120 days, rolled up while the clock moves;
// every resolution's curve still sums to the original totals, and rolling
// up twice changes nothing.
func TestRetentionRollupKeepsTotals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	ctx := context.Background()
	start := t0
	var total, denied int64
	perIface := map[string]int64{}
	// Every 7 hours 13 minutes for 120 days, a few calls on two interfaces.
	for at := start; at.Before(start.Add(120 * 24 * time.Hour)); at = at.Add(7*time.Hour + 13*time.Minute) {
		e.Clk.Set(at)
		for k := 0; k < 3; k++ {
			iface := []string{"a", "b"}[k%2]
			e.Rec.Recorder.Record("app", iface, "u", k != 2)
			total++
			perIface[iface]++
			if k == 2 {
				denied++
			}
		}
		// Flush and roll up now and then, as the cron would.
		if at.Hour() < 8 {
			e.flush()
			if _, err := e.Rec.Rollup.Run(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.flush()
	now := start.Add(121 * 24 * time.Hour)
	e.Clk.Set(now)
	res, err := e.Rec.Rollup.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("final rollup: %+v", res)
	before := seriesTable(t, e.DBs[0])
	res, err = e.Rec.Rollup.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != 0 || seriesTable(t, e.DBs[0]) != before {
		t.Fatalf("second rollup moved %d points / changed the table", res.Moved)
	}
	// Only allowed resolutions remain, each within its retention.
	rows, err := e.DBs[0].Query("SELECT res, MIN(t), COUNT(*) FROM usage_series GROUP BY res")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r, minT, n int64
		_ = rows.Scan(&r, &minT, &n)
		age := now.Sub(time.Unix(minT, 0))
		limit := map[int64]time.Duration{60: 24*time.Hour + 5*time.Minute, 300: 7*24*time.Hour + time.Hour, 3600: 31*24*time.Hour + 7*24*time.Hour, 604800: 1 << 62}[r]
		if age > limit {
			t.Errorf("res %d: oldest point %s old, past retention", r, age)
		}
		t.Logf("res %ds: %d points, oldest %s ago", r, n, age.Round(time.Hour))
	}
	rows.Close()
	from := start.Add(-8 * 24 * time.Hour)
	for _, r := range []analytics.Resolution{analytics.Res1m, analytics.Res5m, analytics.Res1h, analytics.Res1w} {
		to := now
		if r == analytics.Res1m {
			from2 := now.Add(-analytics.MaxPoints * time.Minute)
			if from2.After(from) {
				// 1-minute curve over a year max: sum two halves.
				var sum int64
				for _, rng := range [][2]time.Time{{from, from2}, {from2, now}} {
					pts, err := e.Rec.Stats.Series(ctx, analytics.SeriesQuery{App: "app", From: rng[0], To: rng[1], Res: r})
					if err != nil {
						t.Fatal(err)
					}
					for _, p := range pts {
						sum += p.Calls
					}
				}
				if sum != total {
					t.Errorf("1m curve sums to %d, want %d", sum, total)
				}
				continue
			}
		}
		pts, err := e.Rec.Stats.Series(ctx, analytics.SeriesQuery{App: "app", From: from, To: to, Res: r})
		if err != nil {
			t.Fatal(err)
		}
		var sum, den int64
		for _, p := range pts {
			sum += p.Calls
			den += p.Denied
		}
		if sum != total || den != denied {
			t.Errorf("%s curve: %d calls, %d denied, want %d, %d", r, sum, den, total, denied)
		}
		pts, err = e.Rec.Stats.Series(ctx, analytics.SeriesQuery{App: "app", ByInterface: true, Interface: "b", From: from, To: to, Res: r})
		if err != nil {
			t.Fatal(err)
		}
		sum = 0
		for _, p := range pts {
			sum += p.Calls
		}
		if sum != perIface["b"] {
			t.Errorf("%s curve of interface b: %d calls, want %d", r, sum, perIface["b"])
		}
	}
	// Daily totals are not affected by the rollup.
	var days int64
	for d := day(start); d <= day(now); d++ {
		s, err := e.Rec.Stats.AppDay(ctx, "app", d)
		if err != nil {
			t.Fatal(err)
		}
		days += s.Calls
	}
	if days != total {
		t.Errorf("daily figures sum to %d, want %d", days, total)
	}
}

func TestShardIndexStable(t *testing.T) {
	t.Parallel()
	// Pinned values: changing the hash would move every app's rows.
	for app, want := range map[string]int{"a1": 1, "app-7": 0, "": 1} {
		if got := analytics.ShardIndex(app, 2); got != want {
			t.Errorf("usage.ShardIndex(%q, 2) = %d, want %d", app, got, want)
		}
	}
	if usage.FNV1a64("") != 14695981039346656037 || usage.FNV1a64("a") != 0xaf63dc4c8601ec8c {
		t.Fatalf("FNV-1a 64 of \"a\" = %#x", usage.FNV1a64("a"))
	}
	if analytics.ShardIndex("anything", 1) != 0 {
		t.Fatal("one shard")
	}
}

// failPFADD makes pipelines that hold a PFADD fail while on is set: Redis
// unreachable for the flush's distinct-user adds only.
type failPFADD struct{ on *atomic.Bool }

func (failPFADD) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (failPFADD) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h failPFADD) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if h.on.Load() && c.Name() == "pfadd" {
				return errors.New("injected: redis unreachable")
			}
		}
		return next(ctx, cmds)
	}
}

func TestDistinctUsersWaitForRedisAndAreAddedOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	var failing atomic.Bool
	failing.Store(true)
	e.RDB.AddHook(failPFADD{on: &failing})
	ctx := context.Background()
	// 2,500 users spans several PFADDs of one key; each user calls twice,
	// in two minutes, so the queue holds repeats.
	for m := 0; m < 2; m++ {
		for u := 0; u < 2500; u++ {
			e.Rec.Recorder.Record("a", "i1", fmt.Sprintf("u%d", u), true)
		}
		for u := 0; u < 30; u++ {
			e.Rec.Recorder.Record("a", "i2", fmt.Sprintf("u%d", u), true)
			e.Rec.Recorder.Record("b", "i2", fmt.Sprintf("v%d", u%10), true)
		}
		e.Clk.Advance(time.Minute)
	}
	if err := e.Rec.Flusher.Flush(ctx); err == nil {
		t.Fatal("flush with Redis failing returned no error")
	}
	failing.Store(false)
	e.flush()
	e.flush() // nothing left to add
	appA, err := e.Rec.Stats.AppDay(ctx, "a", day(t0))
	if err != nil {
		t.Fatal(err)
	}
	if appA.Calls != 2*2530 || math.Abs(float64(appA.UniqueUsers)-2500)/2500 > 0.02 {
		t.Fatalf("app a: %d calls, %d unique users; want %d calls, 2500 ± 2%% users", appA.Calls, appA.UniqueUsers, 2*2530)
	}
	for _, c := range []struct {
		app, iface string
		users      int64
	}{{"a", "i1", 2500}, {"a", "i2", 30}, {"b", "i2", 10}} {
		got, err := e.Rec.Stats.InterfaceDay(ctx, c.app, c.iface, day(t0))
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(float64(got.UniqueUsers-c.users))/float64(c.users) > 0.02 {
			t.Errorf("%s/%s: %d unique users, want %d ± 2%%", c.app, c.iface, got.UniqueUsers, c.users)
		}
	}
	u, err := e.Rec.Stats.UserDay(ctx, "a", "u7", day(t0))
	if err != nil || u.Calls != 4 {
		t.Fatalf("user u7 of a: %d calls (%v), want 4 (2 minutes × 2 interfaces)", u.Calls, err)
	}
	if n := e.metric("quota_analytics_flush_errors_total"); n != 1 {
		t.Fatalf("flush errors %v, want 1", n)
	}
}

// A HyperLogLog's TTL is set when a flush first adds to it, and again only
// an hour later: not with every flush (with uniform keys that was one EXPIRE
// per PFADD).
func TestDistinctUsers_TTLIsSetAgainHourlyNotEveryFlush(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, func(o *analytics.Options) { o.PersistEvery = 24 * time.Hour })
	ctx := context.Background()
	e.Rec.Recorder.Record("app", "iface", "u1", true)
	e.flush()
	keys, err := e.RDB.Keys(ctx, e.Prefix+"hll:*").Result()
	if err != nil || len(keys) != 2 {
		t.Fatalf("HLL keys %v (%v), want the app's and the interface's", keys, err)
	}
	ttls := func() []time.Duration {
		var out []time.Duration
		for _, k := range keys {
			out = append(out, e.RDB.TTL(ctx, k).Val())
		}
		return out
	}
	for _, ttl := range ttls() {
		if ttl < 47*time.Hour {
			t.Fatalf("TTLs %v after the first flush, want 48 h", ttls())
		}
	}
	for _, k := range keys {
		e.RDB.Expire(ctx, k, 100*time.Second)
	}
	e.Clk.Advance(15 * time.Second)
	e.Rec.Recorder.Record("app", "iface", "u2", true)
	e.flush()
	for _, ttl := range ttls() {
		if ttl > 100*time.Second {
			t.Fatalf("TTLs %v: the next flush set them again", ttls())
		}
	}
	e.Clk.Advance(time.Hour)
	e.Rec.Recorder.Record("app", "iface", "u3", true)
	e.flush()
	for _, ttl := range ttls() {
		if ttl < 47*time.Hour {
			t.Fatalf("TTLs %v an hour later, want set again to 48 h", ttls())
		}
	}
}
