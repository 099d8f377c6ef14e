package nearquota_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/nearquota"
	"github.com/quota-platform/quota/rules"
)

// The record keeps each identity's highest share (a later, lower crossing
// after a reset does not lower it), at most PerQuota identities a quota
// and period (the lowest dropped), apart per app, rule and period, and
// forgets a period an hour after it ends.
func TestRecord_KeepsTheHighestSharesOfEachQuotaAndPeriod(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	reg := prometheus.NewRegistry()
	rec := nearquota.New(nearquota.Options{Redis: rdb, Prefix: prefix, PerQuota: 3, Registerer: reg})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go rec.Run(ctx)
	end := time.Now().Add(48 * time.Hour).Truncate(time.Second)
	q := limiter.IdentityQuota{Rule: "user_month", Window: rules.Month, Limit: 10, PeriodEnd: end}
	cross := func(app, user string, share float64, end time.Time) {
		rec.Crossed(limiter.Crossing{App: app, Rule: "user_month", Identity: map[string]string{"user_id": user},
			Window: rules.Month, Limit: 10, Threshold: share, PeriodEnd: end})
	}
	cross("a1", "u1", 0.5, end)
	cross("a1", "u1", 0.8, end)
	cross("a1", "u2", 0.5, end)
	cross("a1", "u3", 1, end)
	cross("a1", "u1", 0.5, end) // crossed again after a reset: u1 stays at 0.8
	cross("a1", "u4", 0.8, end) // the fourth: u2 (0.5), the lowest, goes
	cross("a2", "u9", 1, end)
	cross("a1", "old", 1, end.Add(-31*24*time.Hour))
	rec.Crossed(limiter.Crossing{App: "a1", Rule: "user_month", Threshold: 1, PeriodEnd: end}) // an app's own: not recorded
	cross("a1", "last", 0.5, end)                                                              // the fourth again: dropped
	want := []nearquota.Near{
		{Identity: map[string]string{"user_id": "u3"}, Share: 1},
		{Identity: map[string]string{"user_id": "u4"}, Share: 0.8},
		{Identity: map[string]string{"user_id": "u1"}, Share: 0.8},
	}
	waitWritten(t, reg, 9)
	if got, err := rec.Nearest(ctx, "a1", q, 10); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("nearest of a1 (%v):\n got %+v\nwant %+v", err, got, want)
	}
	if got, _ := rec.Nearest(ctx, "a1", q, 1); len(got) != 1 || got[0].Identity["user_id"] != "u3" {
		t.Fatalf("top 1: %+v", got)
	}
	if got, _ := rec.Nearest(ctx, "a2", q, 10); len(got) != 1 || got[0].Identity["user_id"] != "u9" {
		t.Fatalf("a2: %+v", got)
	}
	keys, err := rdb.Keys(ctx, prefix+"near:*").Result()
	if err != nil || len(keys) != 2 {
		t.Fatalf("keys %v %v, want 2 (a1's and a2's of this period; the last period's is gone)", keys, err)
	}
	for _, k := range keys {
		ttl, err := rdb.ExpireTime(ctx, k).Result()
		if err != nil || ttl <= 0 {
			t.Errorf("%s: expire time %v %v, want set", k, ttl, err)
		}
	}
}

// waitWritten waits until the record has written n crossings.
func waitWritten(t *testing.T, g prometheus.Gatherer, n float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var written float64
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if mf.GetName() == "quota_near_quota_writes_total" && l.GetValue() == "written" {
						written = m.GetCounter().GetValue()
					}
				}
			}
		}
		if written >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v crossings written, want %v", written, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
