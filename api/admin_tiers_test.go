package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quota-platform/quota/api"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/metrics"
	"github.com/quota-platform/quota/migrate"
	"github.com/quota-platform/quota/migrate/activity"
	"github.com/quota-platform/quota/migrate/jobs"
	"github.com/quota-platform/quota/migrate/worker"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers/cold"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/routing"
	"github.com/quota-platform/quota/tiers/warm"
)

// tiersServer is quotad's tiering wiring on a test prefix and shards:
// router, activity, worker (thresholds that send every cell called less
// than 1000 times an hour to cold).
func tiersServer(t *testing.T, token string) (*httptest.Server, *clock.Fake) {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	dbs := testenv.MySQLShards(t, 2)
	clk := clock.NewFake(start)
	hs := hot.NewStore(rdb, hot.Options{Prefix: prefix})
	warm := warm.NewStore(rdb, warm.Options{Prefix: prefix})
	cold := cold.NewStore(dbs, cold.Options{})
	router := routing.NewRouter(hs, warm, cold)
	act := &activity.Activity{DBs: dbs, Now: clk.Now}
	router.Calls = act.Observe
	mover := &migrate.Mover{RDB: rdb, Prefix: prefix, Warm: warm, Cold: cold,
		Hot: &hot.Mover{Hot: router.Hot(), Warm: warm, Now: clk.Now}}
	w := &worker.Worker{Mover: mover, Activity: act, DBs: dbs, Now: clk.Now, Jobs: &jobs.Jobs{Instance: "test"},
		Config: worker.Config{Schedule: "@daily", HotThreshold: 2000, ColdThreshold: 1000}}
	set, err := rules.ParseYAML([]byte(defaultRules))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limiter.New(router, clk, set)
	if err != nil {
		t.Fatal(err)
	}
	s := config.Defaults()
	s.AdminToken = token
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(api.New(api.Deps{Settings: s, Limiter: lim, Metrics: metrics.New(reg), Gatherer: reg, Tiers: worker.Admin{W: w}}))
	t.Cleanup(srv.Close)
	return srv, clk
}

func adminCall(t *testing.T, srv *httptest.Server, method, path, token string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, out
}

func TestAdminTiersAuth(t *testing.T) {
	t.Parallel()
	srv, _ := tiersServer(t, adminToken)
	for _, p := range [][2]string{{"GET", "/v1/admin/tiers"}, {"POST", "/v1/admin/migrate"}, {"POST", "/v1/admin/tiers/rebuild-filters"}, {"POST", "/v1/admin/tiers/compact-filters"}} {
		if code, _ := adminCall(t, srv, p[0], p[1], ""); code != http.StatusUnauthorized {
			t.Errorf("%s %s without token: %d, want 401", p[0], p[1], code)
		}
		if code, _ := adminCall(t, srv, p[0], p[1], "wrong-token-0123456789"); code != http.StatusForbidden {
			t.Errorf("%s %s with a wrong token: %d, want 403", p[0], p[1], code)
		}
	}
	off, _ := tiersServer(t, "")
	if code, body := adminCall(t, off, "GET", "/v1/admin/tiers", "x"); code != http.StatusForbidden {
		t.Errorf("admin disabled: %d %v, want 403", code, body)
	}
}

// Calls make hot cells; a migration cycle through the API moves them (to
// cold, by the thresholds), and the tiers endpoint counts them there; the
// check answers still hold and name the tier.
func TestAdminMigrateAndTiers(t *testing.T) {
	t.Parallel()
	srv, clk := tiersServer(t, adminToken)
	for i := range 3 {
		body := fmt.Sprintf(`{"app_id":"a1","ip":"203.0.113.7","user_id":"u%d","interface_id":"users.get"}`, i)
		resp, err := http.Post(srv.URL+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("check: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	code, st := adminCall(t, srv, "GET", "/v1/admin/tiers", adminToken)
	if code != 200 {
		t.Fatalf("tiers: %d %v", code, st)
	}
	for _, tier := range []string{"hot", "warm", "cold"} {
		m, ok := st[tier].(map[string]any)
		if !ok || m["identities"] == nil || m["bytes"] == nil {
			t.Fatalf("tiers answer %v lacks %s.identities/bytes", st, tier)
		}
	}
	clk.Advance(time.Hour)
	code, rep := adminCall(t, srv, "POST", "/v1/admin/migrate", adminToken)
	if code != 200 {
		t.Fatalf("migrate: %d %v", code, rep)
	}
	moved, _ := rep["moved"].(map[string]any)
	// app_ip_hourly (1 cell) and app_user_iface_hourly (3 cells), other
	// default rules aside: at least those 4 went hot>cold.
	if n, _ := moved["hot>cold"].(float64); n < 4 {
		t.Fatalf("migrate answered %v, want at least 4 hot>cold", rep)
	}
	_, st = adminCall(t, srv, "GET", "/v1/admin/tiers", adminToken)
	if n := st["cold"].(map[string]any)["identities"].(float64); n < 4 {
		t.Fatalf("after the cycle: %v", st)
	}
	if code, rb := adminCall(t, srv, "POST", "/v1/admin/tiers/rebuild-filters", adminToken); code != 200 || rb["cells"].(float64) < 4 {
		t.Fatalf("rebuild the cold filters: %d %v, want the 4 cold cells", code, rb)
	}
	// One cycle put each tag's cells in one layer, all still cold.
	if code, cr := adminCall(t, srv, "POST", "/v1/admin/tiers/compact-filters", adminToken); code != 200 || cr["tags"].(float64) < 1 || cr["compacted"] != float64(0) {
		t.Fatalf("compact the cold filters: %d %v, want tags and nothing to compact", code, cr)
	}
	resp, err := http.Post(srv.URL+"/v1/check", "application/json", strings.NewReader(`{"app_id":"a1","ip":"203.0.113.7","user_id":"u0","interface_id":"users.get"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"cold"`) {
		t.Fatalf("check after the move: %d %s", resp.StatusCode, b)
	}
}

// slowTiers is a TiersAdmin whose cycle outlasts the server's WriteTimeout.
type slowTiers struct{ d time.Duration }

func (s slowTiers) TierStats(context.Context) (any, error) { return map[string]int{}, nil }
func (s slowTiers) RebuildColdFilters(context.Context) (any, error) {
	return map[string]int{}, nil
}
func (s slowTiers) CompactColdFilters(context.Context) (any, error) {
	return map[string]int{}, nil
}
func (s slowTiers) Migrate(context.Context) (any, error) {
	time.Sleep(s.d)
	return map[string]int{"scanned": 7}, nil
}

// A migration cycle longer than the server's WriteTimeout still gets its
// report to the caller (quotactl migrate answered EOF after 10 s).
func TestAdminMigrate_OutlivesTheServerWriteTimeout(t *testing.T) {
	t.Parallel()
	s := config.Defaults()
	s.AdminToken = "admin-token-for-tests-0123456789"
	reg := prometheus.NewRegistry()
	h := api.New(api.Deps{Settings: s, Metrics: metrics.New(reg), Gatherer: reg, Tiers: slowTiers{d: 600 * time.Millisecond}})
	srv := httptest.NewUnstartedServer(h)
	srv.Config.WriteTimeout = 200 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	code, rep := adminCall(t, srv, "POST", "/v1/admin/migrate", s.AdminToken)
	if code != http.StatusOK || rep["scanned"] != float64(7) {
		t.Fatalf("%d %v, want 200 with the report", code, rep)
	}
}

// finishingTiers is a TiersAdmin whose jobs take d and report, on done,
// whether their context was cancelled before they ended.
type finishingTiers struct {
	d    time.Duration
	done chan error
}

func (f finishingTiers) wait(ctx context.Context) (any, error) {
	select {
	case <-time.After(f.d):
		f.done <- nil
	case <-ctx.Done():
		f.done <- ctx.Err()
	}
	return map[string]int{}, nil
}

func (f finishingTiers) TierStats(context.Context) (any, error) { return map[string]int{}, nil }
func (f finishingTiers) RebuildColdFilters(ctx context.Context) (any, error) {
	return f.wait(ctx)
}
func (f finishingTiers) CompactColdFilters(ctx context.Context) (any, error) {
	return f.wait(ctx)
}
func (f finishingTiers) Migrate(ctx context.Context) (any, error) { return f.wait(ctx) }

// A long admin job runs to its end when its caller gives up (quotactl's
// timeout, a dropped connection): a compaction or a cycle stopped half
// way has to start again from the beginning.
func TestAdminJobs_RunToTheEndWhenTheCallerGoesAway(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/v1/admin/migrate", "/v1/admin/tiers/rebuild-filters", "/v1/admin/tiers/compact-filters"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			s := config.Defaults()
			s.AdminToken = "admin-token-for-tests-0123456789"
			reg := prometheus.NewRegistry()
			tiers := finishingTiers{d: 300 * time.Millisecond, done: make(chan error, 1)}
			srv := httptest.NewServer(api.New(api.Deps{Settings: s, Metrics: metrics.New(reg), Gatherer: reg, Tiers: tiers}))
			t.Cleanup(srv.Close)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, "POST", srv.URL+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+s.AdminToken)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				t.Fatalf("the caller got %d before giving up", resp.StatusCode)
			}
			if err := <-tiers.done; err != nil {
				t.Fatalf("the job stopped when its caller went away: %v", err)
			}
		})
	}
}
