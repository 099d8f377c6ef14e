package limiter_test

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers/hot"
)

// crossings records what a limiter tells a watcher.
type crossings struct {
	mu  sync.Mutex
	got []limiter.Crossing
}

func (c *crossings) Crossed(x limiter.Crossing) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, x)
}

func (c *crossings) take() []limiter.Crossing {
	c.mu.Lock()
	defer c.mu.Unlock()
	got := c.got
	c.got = nil
	return got
}

// An identity's calendar quota tells the identity watcher of 50, 80 and
// 100 % once each, with the identity's dimensions, whatever the steps a
// check's cost takes; an app's own quota goes to the app watcher alone,
// and a quota of no app (or not calendar) to neither.
func TestIdentityQuotaCrossings_EachShareOnceWithTheIdentity(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	set, err := rules.ParseYAML([]byte(`rules:
  - {name: user_month, dimensions: [app_id, user_id], limit: 10, window: month, algorithm: fixed_window}
  - {name: app_day, dimensions: [app_id], limit: 20, window: day, algorithm: fixed_window}
  - {name: user_hour, dimensions: [app_id, user_id], limit: 1000, window: 1h, algorithm: fixed_window}
  - {name: ip_month, dimensions: [ip], limit: 100, window: month, algorithm: fixed_window}
`))
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	apps, ids := &crossings{}, &crossings{}
	lim, err := limiter.New(hot.NewStore(rdb, hot.Options{Prefix: prefix}), clk, set,
		limiter.WithQuotaWatcher(apps), limiter.WithIdentityQuotaWatcher(ids))
	if err != nil {
		t.Fatal(err)
	}
	monthEnd := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	crossed := func(used int64, share float64) limiter.Crossing {
		return limiter.Crossing{App: "a1", Rule: "user_month", Identity: map[string]string{"user_id": "u1"},
			Window: rules.Month, Limit: 10, Used: used, Threshold: share, PeriodEnd: monthEnd}
	}
	for _, step := range []struct {
		cost    int64
		allowed bool
		want    []limiter.Crossing
	}{
		{4, true, nil},
		{1, true, []limiter.Crossing{crossed(5, 0.5)}},
		{2, true, nil},
		{1, true, []limiter.Crossing{crossed(8, 0.8)}},
		{3, false, nil}, // denied: counts nothing, crosses nothing
		{2, true, []limiter.Crossing{crossed(10, 1)}},
		{1, false, nil},
	} {
		d, err := lim.Check(context.Background(), &limiter.Request{Cost: step.cost, Dims: []limiter.Dim{
			{Name: "app_id", Value: "a1"}, {Name: "user_id", Value: "u1"}, {Name: "ip", Value: "10.0.0.1"}}})
		if err != nil || d.Allowed != step.allowed {
			t.Fatalf("cost %d: allowed %v err %v, want %v", step.cost, d.Allowed, err, step.allowed)
		}
		if got := ids.take(); !reflect.DeepEqual(got, step.want) {
			t.Fatalf("cost %d: identity crossings\n got %+v\nwant %+v", step.cost, got, step.want)
		}
	}
	// app_day reached 10 of 20 (50 %): no app threshold yet; ip_month is
	// no app's quota.
	if got := apps.take(); len(got) != 0 {
		t.Fatalf("app crossings %+v, want none", got)
	}
	d, err := lim.Check(context.Background(), &limiter.Request{Cost: 6, Dims: []limiter.Dim{
		{Name: "app_id", Value: "a1"}, {Name: "user_id", Value: "u2"}}})
	if err != nil || !d.Allowed {
		t.Fatalf("u2: %v %v", d.Allowed, err)
	}
	if got := apps.take(); len(got) != 1 || got[0].Identity != nil || got[0].Rule != "app_day" || got[0].Threshold != 0.8 {
		t.Fatalf("app crossings %+v, want app_day at 0.8 without identity", got)
	}
	if got := ids.take(); len(got) != 1 || got[0].Threshold != 0.5 || got[0].Identity["user_id"] != "u2" {
		t.Fatalf("identity crossings %+v, want u2 at 0.5", got)
	}
}

// IdentityQuotas lists an app's calendar quotas counted per identity, with
// its plan's limits and the period's end by the limiter's clock.
func TestIdentityQuotas_ListsTheAppsCalendarQuotasPerIdentity(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	set, err := rules.ParseYAML([]byte(`rules:
  - {name: user_month, dimensions: [app_id, user_id], limit: 10, window: month, algorithm: fixed_window}
  - {name: app_day, dimensions: [app_id], limit: 20, window: day, algorithm: fixed_window}
  - {name: user_hour, dimensions: [app_id, user_id], limit: 1000, window: 1h, algorithm: fixed_window}
  - {name: only_a2, dimensions: [app_id, ip], match: {app_id: a2}, limit: 3, window: day, algorithm: fixed_window}
plans:
  pro: {user_month: 50}
`))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	lim, err := limiter.New(hot.NewStore(rdb, hot.Options{Prefix: prefix}), clock.NewFake(now), set)
	if err != nil {
		t.Fatal(err)
	}
	lim.SetAssignments(&rules.Assignments{Plans: map[string]string{"a3": "pro"}})
	monthEnd := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	dayEnd := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	month := func(limit int64) limiter.IdentityQuota {
		return limiter.IdentityQuota{Rule: "user_month", Dimensions: []string{"app_id", "user_id"}, Window: rules.Month,
			Limit: limit, PeriodEnd: monthEnd, ResetAfter: monthEnd.Sub(now)}
	}
	onlyA2 := limiter.IdentityQuota{Rule: "only_a2", Dimensions: []string{"app_id", "ip"}, Match: map[string]string{"app_id": "a2"},
		Window: rules.Day, Limit: 3, PeriodEnd: dayEnd, ResetAfter: dayEnd.Sub(now)}
	for _, tc := range []struct {
		app  string
		want []limiter.IdentityQuota
	}{
		{"a1", []limiter.IdentityQuota{month(10)}},
		{"a2", []limiter.IdentityQuota{month(10), onlyA2}},
		{"a3", []limiter.IdentityQuota{month(50)}},
	} {
		if got := lim.IdentityQuotas(tc.app); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.app, got, tc.want)
		}
	}
}
