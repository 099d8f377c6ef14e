package analytics

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// heldFlush is one of Run's flushes with Options.HoldOpenMinute, at the
// recorder's clock (unpaced).
func heldFlush(t *testing.T, r *Analytics) error {
	t.Helper()
	r.Flusher.opt.HoldOpenMinute = true
	return r.Flusher.flush(context.Background(), false, nil, r.Flusher.periodicHold())
}

// storedSeries is usage_series' 1-minute points of app, summed over its
// interfaces, as "t:calls/allowed/denied".
func storedSeries(t *testing.T, db *sql.DB, app string) []string {
	t.Helper()
	rows, err := db.Query("SELECT t, SUM(calls), SUM(allowed), SUM(denied) FROM usage_series WHERE app_id = ? AND res = 60 GROUP BY t ORDER BY t", app)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var ts, c, a, d int64
		if err := rows.Scan(&ts, &c, &a, &d); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d:%d/%d/%d", ts, c, a, d))
	}
	return out
}

func storedDaily(t *testing.T, db *sql.DB, app string) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow("SELECT COALESCE(SUM(calls), 0) FROM usage_daily WHERE app_id = ?", app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// memoryAndStored is what the stats answer: the app's calls today and the
// calls of its curve's points from 10:00 for three minutes.
func memoryAndStored(t *testing.T, r *Analytics, app string) (day int64, curve []int64) {
	t.Helper()
	ctx := context.Background()
	st, err := r.Stats.AppDay(ctx, app, DayOf(r.Flusher.clk.Now()))
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	pts, err := r.Stats.Series(ctx, SeriesQuery{App: app, From: from, To: from.Add(3 * time.Minute), Res: Res1m})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pts {
		curve = append(curve, p.Calls)
	}
	return st.Calls, curve
}

// With HoldOpenMinute a periodic flush leaves the minute in progress' day
// and curve figures in memory, and the first flush after the minute writes
// them, once: each (app, interface, minute) row is upserted once, not once
// per flush. Every answer meanwhile counts each call once.
func TestHeldMinute_WrittenOnceByTheFirstFlushAfterIt(t *testing.T) {
	t.Parallel()
	r, db, clk := newShardRecorder(t) // 10:00:00
	m0 := clk.Now().Unix()
	steps := []struct {
		name      string
		advance   time.Duration
		calls     int
		stored    []string // usage_series after the step's flush
		daily     int64    // usage_daily's sum after it
		statement float64  // usage_series statements so far
		day       int64
		curve     []int64
	}{
		{"10:00:00, minute in progress", 0, 5, nil, 0, 0, 5, []int64{5, 0, 0}},
		{"10:00:20, the same minute", 20 * time.Second, 3, nil, 0, 0, 8, []int64{8, 0, 0}},
		{"10:01:05, the minute is over", 45 * time.Second, 2, []string{fmt.Sprintf("%d:8/6/2", m0)}, 8, 1, 10, []int64{8, 2, 0}},
		{"10:01:50, nothing over", 45 * time.Second, 1, []string{fmt.Sprintf("%d:8/6/2", m0)}, 8, 1, 11, []int64{8, 3, 0}},
		{"10:02:01, no call", 11 * time.Second, 0, []string{fmt.Sprintf("%d:8/6/2", m0), fmt.Sprintf("%d:3/3/0", m0+60)}, 11, 2, 11, []int64{8, 3, 0}},
	}
	n := 0
	for _, s := range steps {
		clk.Advance(s.advance)
		for i := 0; i < s.calls; i++ {
			n++
			r.Recorder.Record("app", "if", fmt.Sprintf("u%d", n%3), n%4 != 0) // calls 4 and 8 denied
		}
		if err := heldFlush(t, r); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := storedSeries(t, db, "app"); fmt.Sprint(got) != fmt.Sprint(s.stored) {
			t.Errorf("%s: usage_series %v, want %v", s.name, got, s.stored)
		}
		if got := storedDaily(t, db, "app"); got != s.daily {
			t.Errorf("%s: usage_daily holds %d calls, want %d", s.name, got, s.daily)
		}
		if got := testutil.ToFloat64(r.Flusher.met.statements.WithLabelValues("usage_series")); got != s.statement {
			t.Errorf("%s: %v usage_series statements, want %v", s.name, got, s.statement)
		}
		day, curve := memoryAndStored(t, r, "app")
		if day != s.day || fmt.Sprint(curve) != fmt.Sprint(s.curve) {
			t.Errorf("%s: stats say %d calls, curve %v; want %d, %v", s.name, day, curve, s.day, s.curve)
		}
	}
	// The per-user figures were written by every flush, held minute or not.
	u, err := r.Stats.UserDay(context.Background(), "app", "u1", DayOf(clk.Now()))
	if err != nil || u.Calls != 4 {
		t.Fatalf("u1: %+v %v, want 4 calls", u.Counts, err)
	}
	if p := r.Flusher.shards[0].pending.len(); p != 0 {
		t.Fatalf("%d rows pending after a flush past every call's minute", p)
	}
}

// A held flush whose transaction fails keeps both what it meant to write
// and the minute it held; the next one writes each call once.
func TestHeldMinute_FailedWriteLosesAndDoublesNothing(t *testing.T) {
	t.Parallel()
	r, db, clk := newShardRecorder(t) // 10:00:00
	m0 := clk.Now().Unix()
	record := func(n int) {
		for i := 0; i < n; i++ {
			r.Recorder.Record("app", fmt.Sprintf("if%d", i%2), fmt.Sprintf("u%d", i%5), true)
		}
	}
	record(10)
	clk.Advance(70 * time.Second) // 10:01:10
	record(4)
	if _, err := db.Exec("RENAME TABLE usage_user_chunks TO usage_user_chunks_gone"); err != nil {
		t.Fatal(err)
	}
	if err := heldFlush(t, r); err == nil {
		t.Fatal("flush succeeded without usage_user_chunks")
	}
	if day, curve := memoryAndStored(t, r, "app"); day != 14 || fmt.Sprint(curve) != "[10 4 0]" {
		t.Fatalf("after the failed flush: %d calls, curve %v; want 14, [10 4 0]", day, curve)
	}
	if _, err := db.Exec("RENAME TABLE usage_user_chunks_gone TO usage_user_chunks"); err != nil {
		t.Fatal(err)
	}
	record(2)                     // still 10:01
	clk.Advance(60 * time.Second) // 10:02:10: 10:01 is over
	record(1)
	if err := heldFlush(t, r); err != nil {
		t.Fatal(err)
	}
	want := []string{fmt.Sprintf("%d:10/10/0", m0), fmt.Sprintf("%d:6/6/0", m0+60)}
	if got := storedSeries(t, db, "app"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("usage_series %v, want %v", got, want)
	}
	if got := storedDaily(t, db, "app"); got != 16 {
		t.Fatalf("usage_daily holds %d calls, want 16 (the 10:02 call held)", got)
	}
	if day, curve := memoryAndStored(t, r, "app"); day != 17 || fmt.Sprint(curve) != "[10 6 1]" {
		t.Fatalf("after the retry: %d calls, curve %v; want 17, [10 6 1]", day, curve)
	}
	if err := r.Flusher.Flush(context.Background()); err != nil { // writes the held minute too
		t.Fatal(err)
	}
	if got := storedDaily(t, db, "app"); got != 17 {
		t.Fatalf("after Flush usage_daily holds %d calls, want 17", got)
	}
}
