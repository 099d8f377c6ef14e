package limiter_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quota-platform/quota/appplans"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/hot"
)

const plansRules = `
rules:
  - name: app_hourly
    dimensions: [app_id]
    limit: 20
    window: 1h
    algorithm: fixed_window
  - name: app_user_daily
    dimensions: [app_id, user_id]
    limit: 5
    window: day
    algorithm: fixed_window
plans:
  pro: {app_hourly: 60}
  partner: {app_hourly: {limits: [{limit: 3, window: 1s}, {limit: 100, window: 1h}]}}
`

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newPlansLimiter(t *testing.T, clk clock.Clock, loc *time.Location) (*limiter.Limiter, *appplans.Store, *appplans.Syncer) {
	t.Helper()
	lim, _, store, y := newPlansInstance(t, clk, loc)
	return lim, store, y
}

func newPlansInstance(t *testing.T, clk clock.Clock, loc *time.Location) (*limiter.Limiter, tiers.Store, *appplans.Store, *appplans.Syncer) {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	set, err := rules.ParseYAML([]byte(plansRules))
	if err != nil {
		t.Fatal(err)
	}
	hot := hot.NewStore(rdb, hot.Options{Prefix: prefix})
	lim, err := limiter.New(hot, clk, set, limiter.InLocation(loc))
	if err != nil {
		t.Fatal(err)
	}
	store := appplans.NewStore(rdb, prefix)
	y := &appplans.Syncer{Store: store, Apply: lim.SetAssignments, Log: quiet}
	return lim, hot, store, y
}

func call(app, user string) *limiter.Request {
	return &limiter.Request{Cost: 1, Dims: []limiter.Dim{{Name: "app_id", Value: app}, {Name: "user_id", Value: user}}}
}

// Each app is counted once per rule, with its plan's or its override's
// limit: 64 concurrent callers per app get exactly that many through, and
// an app on no plan keeps the rule's own limit.
func TestCheck_PlansAndOverridesGiveEachAppExactlyItsLimit(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	lim, store, y := newPlansLimiter(t, clk, time.UTC)
	ctx := context.Background()
	for _, w := range []func() (int64, error){
		func() (int64, error) { return store.SetPlan(ctx, "a-pro", "pro") },
		func() (int64, error) { return store.SetPlan(ctx, "a-partner", "partner") },
		func() (int64, error) { return store.SetPlan(ctx, "a-over", "pro") },
		func() (int64, error) {
			return store.SetOverride(ctx, "a-over", "app_hourly", rules.LimitsSpec{Limit: 33})
		},
	} {
		if _, err := w(); err != nil {
			t.Fatal(err)
		}
	}
	if err := y.Load(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"a-free": 20, "a-pro": 60, "a-over": 33, "a-partner": 3}
	for app, n := range want {
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 2 {
					// Distinct users: only app_hourly binds.
					d, err := lim.Check(ctx, call(app, fmt.Sprintf("u%d-%d", g, i)))
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						allowed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if got := allowed.Load(); got != n {
			t.Errorf("%s: %d allowed, want exactly %d", app, got, n)
		}
		d, err := lim.Check(ctx, call(app, "last"))
		if err != nil {
			t.Fatal(err)
		}
		// The answer shows the limit that applied, once per rule.
		if d.Entries[0].Rule != "app_hourly" || d.Entries[0].Limit != n || d.Entries[0].Remaining != 0 {
			t.Errorf("%s: first entry %+v, want app_hourly with limit %d and none left", app, d.Entries[0], n)
		}
	}
}

// A plan change takes effect on another instance at its next poll, and an
// override deleted gives the app its plan's limit again.
func TestSyncer_PlanChangesReachEveryInstance(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	a, hot, store, ya := newPlansInstance(t, clk, time.UTC)
	b, err := limiter.New(hot, clk, a.Rules())
	if err != nil {
		t.Fatal(err)
	}
	yb := &appplans.Syncer{Store: store, Apply: b.SetAssignments, Log: quiet}
	ctx := context.Background()
	if err := yb.Load(ctx); err != nil {
		t.Fatal(err)
	}
	limitOn := func(l *limiter.Limiter) int64 {
		d, err := l.Check(ctx, &limiter.Request{Cost: 1, DryRun: true, Dims: []limiter.Dim{{Name: "app_id", Value: "x"}}})
		if err != nil {
			t.Fatal(err)
		}
		return d.Entries[0].Limit
	}
	if _, err := store.SetPlan(ctx, "x", "pro"); err != nil {
		t.Fatal(err)
	}
	ya.Poll(ctx)
	if got := limitOn(b); got != 20 {
		t.Fatalf("b before its poll: limit %d, want 20", got)
	}
	yb.Poll(ctx)
	if la, lb := limitOn(a), limitOn(b); la != 60 || lb != 60 {
		t.Fatalf("after the polls: %d and %d, want 60 on both", la, lb)
	}
	if _, err := store.SetOverride(ctx, "x", "app_hourly", rules.LimitsSpec{Limit: 9}); err != nil {
		t.Fatal(err)
	}
	yb.Poll(ctx)
	if got := limitOn(b); got != 9 {
		t.Fatalf("override: %d, want 9", got)
	}
	if _, err := store.DeleteOverride(ctx, "x", "app_hourly"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.SetPlan(ctx, "x", rules.DefaultPlan); err != nil {
		t.Fatal(err)
	}
	yb.Poll(ctx)
	if got := limitOn(b); got != 20 {
		t.Fatalf("back on the default plan: %d, want 20", got)
	}
}

// A daily quota resets at local midnight, and its reset is exact across a
// 23- and a 25-hour day (America/New_York, Europe/Berlin) and a day that
// starts at 16:00 UTC (Asia/Shanghai).
func TestCheck_CalendarDayResetsAtLocalMidnightAcrossDST(t *testing.T) {
	t.Parallel()
	zone := func(name string) *time.Location {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		return loc
	}
	cases := []struct {
		name     string
		loc      *time.Location
		at       time.Time // a moment of the day
		midnight time.Time // its end
	}{
		{"New York 23h", zone("America/New_York"), time.Date(2026, 3, 8, 0, 30, 0, 0, zone("America/New_York")), time.Date(2026, 3, 9, 4, 0, 0, 0, time.UTC)},
		{"New York 25h", zone("America/New_York"), time.Date(2026, 11, 1, 0, 30, 0, 0, zone("America/New_York")), time.Date(2026, 11, 2, 5, 0, 0, 0, time.UTC)},
		{"Berlin 23h", zone("Europe/Berlin"), time.Date(2026, 3, 29, 0, 30, 0, 0, zone("Europe/Berlin")), time.Date(2026, 3, 29, 22, 0, 0, 0, time.UTC)},
		{"Berlin 25h", zone("Europe/Berlin"), time.Date(2026, 10, 25, 0, 30, 0, 0, zone("Europe/Berlin")), time.Date(2026, 10, 25, 23, 0, 0, 0, time.UTC)},
		{"Shanghai", zone("Asia/Shanghai"), time.Date(2026, 11, 29, 16, 30, 0, 0, time.UTC), time.Date(2026, 11, 30, 16, 0, 0, 0, time.UTC)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(c.at)
			lim, _, _ := newPlansLimiter(t, clk, c.loc)
			ctx := context.Background()
			user := call("app-"+testenv.RandomHex(3), "u")
			for i := range 6 {
				d, err := lim.Check(ctx, user)
				if err != nil {
					t.Fatal(err)
				}
				e := d.Entries[1] // app_user_daily
				if e.Rule != "app_user_daily" || rules.Duration(e.Window).String() != "day" {
					t.Fatalf("entry %+v", e)
				}
				if want := c.midnight.Sub(clk.Now()); e.ResetAfter != want {
					t.Fatalf("call %d: reset after %s, want %s", i, e.ResetAfter, want)
				}
				if d.Allowed != (i < 5) {
					t.Fatalf("call %d: allowed %v", i, d.Allowed)
				}
				if i == 5 && d.RetryAfter() != c.midnight.Sub(clk.Now()) {
					t.Fatalf("retry after %s, want %s", d.RetryAfter(), c.midnight.Sub(clk.Now()))
				}
				clk.Advance(time.Hour) // stays inside the day: the cases start at 00:30 local or earlier
			}
			// One second before midnight: still the same day's quota.
			clk.Set(c.midnight.Add(-time.Second))
			if d, _ := lim.Check(ctx, user); d.Allowed {
				t.Fatal("allowed a second before local midnight")
			}
			// Midnight: a new day, a new quota.
			clk.Set(c.midnight)
			if d, _ := lim.Check(ctx, user); !d.Allowed {
				t.Fatal("denied at local midnight")
			}
		})
	}
}

// An app denied at its limit, and remembered by the denial cache, is let
// in as soon as its plan raises the limit: the cache's key holds the limit,
// so the raised limit misses the entry (the test fails if it did not).
func TestSetAssignments_ARaisedLimitLetsACachedDenialIn(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	lim, store, y := newPlansLimiter(t, clk, time.UTC)
	d := limiter.NewDenials(1024)
	lim.UseDenials(d)
	ctx := context.Background()
	req := &limiter.Request{Cost: 1, Dims: []limiter.Dim{{Name: "app_id", Value: "a-up"}}}
	for range 20 {
		if dec, err := lim.Check(ctx, req); err != nil || !dec.Allowed {
			t.Fatalf("within the limit: %+v %v", dec, err)
		}
	}
	for range 3 {
		if dec, _ := lim.Check(ctx, req); dec.Allowed {
			t.Fatal("allowed past the default plan's 20")
		}
	}
	if d.Hits() == 0 {
		t.Fatal("the denials were not answered from the cache: the test proves nothing")
	}
	if _, err := store.SetPlan(ctx, "a-up", "pro"); err != nil {
		t.Fatal(err)
	}
	y.Poll(ctx)
	if dec, err := lim.Check(ctx, req); err != nil || !dec.Allowed || dec.Entries[0].Limit != 60 {
		t.Fatalf("after the plan change: %+v %v, want allowed under pro's 60", dec, err)
	}
}
