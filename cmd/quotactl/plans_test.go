package main

import (
	"bytes"
	"io"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quota-platform/quota/api"
	"github.com/quota-platform/quota/appplans"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/metrics"
	"github.com/quota-platform/quota/nearquota"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers/hot"
)

// quotactl plans sets a plan and an override through the admin API and
// shows the usage they give; a refused change exits 1 with the reason.
func TestPlans_SetOverrideAndUsage(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	set, err := rules.ParseYAML([]byte("rules:\n  - {name: app_daily, dimensions: [app_id], limit: 10, window: day, algorithm: fixed_window}\n" +
		"  - {name: user_monthly, dimensions: [app_id, user_id], limit: 4, window: month, algorithm: fixed_window}\nplans:\n  pro: {app_daily: 100}\n"))
	if err != nil {
		t.Fatal(err)
	}
	near := nearquota.New(nearquota.Options{Redis: rdb, Prefix: prefix})
	go near.Run(t.Context())
	lim, err := limiter.New(hot.NewStore(rdb, hot.Options{Prefix: prefix}), clock.NewFake(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)), set,
		limiter.WithIdentityQuotaWatcher(near))
	if err != nil {
		t.Fatal(err)
	}
	store := appplans.NewStore(rdb, prefix)
	shared := &appplans.Shared{Store: store, Syncer: &appplans.Syncer{Store: store, Apply: lim.SetAssignments, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	s := config.Defaults()
	s.AdminToken = "tok"
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(api.New(api.Deps{Settings: s, Limiter: lim, Metrics: metrics.New(reg), Gatherer: reg, AppPlans: shared, Nearest: near}))
	t.Cleanup(srv.Close)
	quotactl := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(append([]string{"--url", srv.URL, "--token", "tok"}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	steps := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"plans", "set", "a1", "pro"}, 0, `"plan": "pro"`},
		{[]string{"plans", "set", "a1", "gold"}, 1, `no plan "gold"`},
		{[]string{"plans", "override", "a2", "app_daily", "40/day"}, 0, `"limit": 40`},
		{[]string{"plans", "override", "a2", "app_daily", "zero"}, 1, "want N or N/WINDOW"},
		{[]string{"plans", "show", "a2"}, 0, `"app_daily"`},
		{[]string{"plans", "usage", "a1"}, 0, "app a1 on plan pro"},
		{[]string{"plans", "usage", "a2"}, 0, "40"},
		{[]string{"plans", "unoverride", "a2", "app_daily"}, 0, "deleted"},
	}
	for _, st := range steps {
		code, out, errs := quotactl(st.args...)
		if code != st.code || !strings.Contains(out+errs, st.want) {
			t.Fatalf("quotactl %v: exit %d, out %q, err %q; want exit %d with %q", st.args, code, out, errs, st.code, st.want)
		}
	}
	if d, _ := lim.Check(t.Context(), &limiter.Request{Cost: 3, Dims: []limiter.Dim{{Name: "app_id", Value: "a1"}, {Name: "user_id", Value: "u7"}}}); d.Entries[0].Limit != 100 {
		t.Fatalf("a1's limit %d, want its plan's 100", d.Entries[0].Limit)
	}
	_, out, _ := quotactl("plans", "usage", "a1")
	if !strings.Contains(out, "app_daily") || !strings.Contains(out, "97") {
		t.Fatalf("usage after one check:\n%s", out)
	}
	// u7 used 3 of its 4 a month: the nearest list shows it (written off the
	// check path, so it may take a moment).
	want := regexp.MustCompile(`user_monthly +month +user_id=u7 +3 +4 +75\.0 +`)
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, out, errs := quotactl("plans", "nearest", "a1", "5")
		if code == 0 && want.MatchString(out) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("plans nearest: exit %d\n%s%s", code, out, errs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code, _, errs := quotactl("plans", "nearest", "a1", "0"); code != 1 || !strings.Contains(errs, "invalid_top") && !strings.Contains(errs, "top") {
		t.Fatalf("plans nearest a1 0: exit %d %s", code, errs)
	}
}
