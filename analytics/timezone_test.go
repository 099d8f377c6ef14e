package analytics_test

import (
	"context"
	"testing"
	"time"

	"github.com/quota-platform/quota/analytics"
)

// With QUOTA_TIMEZONE=Asia/Shanghai a call at 16:30 UTC is on the next
// day's figures (00:30 there), "today" is Shanghai's, and distinct users
// are counted per Shanghai day; in America/New_York the 25-hour day of
// the fall-back holds all its hours.
func TestDays_TheAnalyticsDayIsTheZonesDate(t *testing.T) {
	t.Parallel()
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, 2, func(o *analytics.Options) { o.Location = shanghai })
	ctx := context.Background()
	e.Clk.Set(time.Date(2026, 11, 29, 15, 59, 0, 0, time.UTC)) // 23:59 on the 29th in Shanghai
	e.Rec.Recorder.Record("app", "i", "u1", true)
	e.Clk.Set(time.Date(2026, 11, 29, 16, 30, 0, 0, time.UTC)) // 00:30 on the 30th
	e.Rec.Recorder.Record("app", "i", "u2", true)
	e.Rec.Recorder.Record("app", "i", "u3", false)
	if got := e.Rec.Stats.Today().String(); got != "2026-11-30" {
		t.Fatalf("today %s, want Shanghai's 2026-11-30", got)
	}
	for _, when := range []string{"in memory", "flushed"} {
		for date, want := range map[string][3]int64{"2026-11-29": {1, 1, 1}, "2026-11-30": {2, 1, 2}} {
			d, err := analytics.ParseDay(date)
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.Rec.Stats.AppDay(ctx, "app", d)
			if err != nil {
				t.Fatal(err)
			}
			if [3]int64{got.Calls, got.Allowed, got.UniqueUsers} != want {
				t.Errorf("%s, %s: calls, allowed, users %d %d %d; want %v", when, date, got.Calls, got.Allowed, got.UniqueUsers, want)
			}
		}
		e.flush()
	}
}

func TestDays_OfFollowsTheZonesDate(t *testing.T) {
	t.Parallel()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	z := analytics.Days{Loc: ny}
	cases := []struct {
		at   time.Time
		want string
	}{
		{time.Date(2026, 11, 1, 4, 0, 0, 0, time.UTC), "2026-11-01"},   // 00:00 EDT: the 25-hour day starts
		{time.Date(2026, 11, 2, 4, 59, 59, 0, time.UTC), "2026-11-01"}, // 23:59:59 EST: 25 hours later, still that day
		{time.Date(2026, 11, 2, 5, 0, 0, 0, time.UTC), "2026-11-02"},
		{time.Date(2026, 3, 8, 4, 59, 59, 0, time.UTC), "2026-03-07"},
		{time.Date(2026, 3, 8, 5, 0, 0, 0, time.UTC), "2026-03-08"}, // the 23-hour day
		{time.Date(2026, 3, 9, 3, 59, 59, 0, time.UTC), "2026-03-08"},
		{time.Date(2026, 3, 9, 4, 0, 0, 0, time.UTC), "2026-03-09"},
	}
	for _, c := range cases {
		if got := z.Of(c.at).String(); got != c.want {
			t.Errorf("%s: day %s, want %s", c.at, got, c.want)
		}
	}
	if got := (analytics.Days{}).Of(time.Date(2026, 11, 29, 23, 59, 0, 0, time.UTC)).String(); got != "2026-11-29" {
		t.Errorf("UTC: %s", got)
	}
}
