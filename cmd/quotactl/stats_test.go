package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quota-platform/quota/analytics"
	"github.com/quota-platform/quota/api"
	"github.com/quota-platform/quota/apps"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/metrics"
)

const admin = "quotactl-test-admin-token-01"

// quotactl stats against quotad's real stats API (real Redis and MariaDB).
func TestStatsTable(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	dbs := testenv.MySQLShards(t, 1)
	clk := clock.NewFake(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	rec, err := analytics.New(analytics.Options{DBs: dbs, Redis: rdb, KeyPrefix: prefix, Clock: clk, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	s := config.Defaults()
	s.AdminToken = admin
	srv := httptest.NewServer(api.New(api.Deps{Settings: s, Metrics: metrics.New(reg), Gatherer: reg, Analytics: rec.Stats, Keys: apps.New(dbs, clk)}))
	defer srv.Close()
	for i := 0; i < 12345; i++ {
		rec.Recorder.Record("shop", []string{"users.get", "orders.list"}[i%2], "u"+string(rune('a'+i%5)), i%10 != 0)
	}
	clk.Advance(24 * time.Hour)
	rec.Recorder.Record("shop", "users.get", "x", true)
	if err := rec.Flusher.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run([]string{"--url", srv.URL, "stats", "shop", "--date", "2026-11-23", "--token", admin}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	got := out.String()
	t.Logf("\n%s", got)
	for _, want := range []string{"app shop, 2026-11-23 (UTC)", "12,345", "11,110", "1,235", "10.0%", "users.get", "orders.list", "6,173", "unique users"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	// Today by default; errors are one line with the contract's code.
	out.Reset()
	if code := run([]string{"--url", srv.URL, "--token", admin, "stats", "shop"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "2026-11-24") {
		t.Fatalf("default date: %d %s", code, out.String())
	}
	errb.Reset()
	if code := run([]string{"--url", srv.URL, "--token", admin, "stats", "shop", "--date", "23/11/2026"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "invalid_date") {
		t.Fatalf("bad date: %d %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"--url", srv.URL, "--token", "nope", "stats", "shop"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "401") {
		t.Fatalf("bad token: %d %q", code, errb.String())
	}
	if code := run([]string{"stats"}, &out, &errb); code != 2 {
		t.Fatalf("no app: exit %d", code)
	}
}
