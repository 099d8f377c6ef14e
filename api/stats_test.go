package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
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
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/metrics"
	"github.com/quota-platform/quota/nearquota"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers/hot"
)

// statsRules deny the 4th call of one (app, user, interface) in an hour.
const statsRules = `rules:
  - name: app_user_iface_hourly
    dimensions: [app_id, user_id, interface_id]
    limit: 3
    window: 1h
    algorithm: fixed_window
`

type statsHarness struct {
	*harness
	rec *analytics.Analytics
}

// newStatsHarness is quotad with analytics on real Redis and a fresh
// MariaDB database (two shards), the limiter and recorder on one fake clock.
func newStatsHarness(t *testing.T) *statsHarness { t.Helper(); return newStatsHarnessAt(t, start) }

// newStatsHarnessAt starts the fake clock at at.
func newStatsHarnessAt(t *testing.T, at time.Time) *statsHarness {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	dbs := testenv.MySQLShards(t, 2)
	set, err := rules.ParseYAML([]byte(statsRules))
	if err != nil {
		t.Fatal(err)
	}
	s := config.Defaults()
	s.AdminToken = adminToken
	clk := clock.NewFake(at)
	hot := hot.NewStore(rdb, hot.Options{Prefix: prefix, Jitter: time.Second})
	near := nearquota.New(nearquota.Options{Redis: rdb, Prefix: prefix})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go near.Run(ctx)
	lim, err := limiter.New(hot, clk, set, limiter.WithIdentityQuotaWatcher(near))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	rec, err := analytics.New(analytics.Options{DBs: dbs, Redis: rdb, KeyPrefix: prefix, Clock: clk, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := serveEdge(t, api.New(api.Deps{
		Settings: s, Limiter: lim, Metrics: metrics.New(reg), Gatherer: reg,
		Usage: rec.Recorder, Analytics: rec.Stats, Throttled: rec.Throttled, Keys: apps.New(dbs, clk),
		Nearest: near,
	}))
	return &statsHarness{harness: &harness{t: t, srv: srv, clk: clk, rdb: rdb, prefix: prefix, lim: lim, reg: reg}, rec: rec}
}

func (h *statsHarness) get(path, token string) reply {
	h.t.Helper()
	if token == "" {
		return h.do("GET", path, "", "")
	}
	return h.do("GET", path, "", "", "Authorization", "Bearer "+token)
}

func (h *statsHarness) mint(app string) string {
	h.t.Helper()
	r := h.do("POST", "/v1/admin/apps", "application/json", `{"app_id":`+jsonString(app)+`}`, "Authorization", "Bearer "+adminToken)
	if r.status != 201 || r.body["app_id"] != app {
		h.t.Fatalf("mint %q: %d %s", app, r.status, r.raw)
	}
	return r.body["key"].(string)
}

func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		if r == '"' || r == '\\' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
	return b.String()
}

func num(r reply, k string) int64 {
	v, _ := r.body[k].(float64)
	return int64(v)
}

type tally struct{ calls, allowed, denied int64 }

func (t *tally) add(allowed bool) {
	t.calls++
	if allowed {
		t.allowed++
	} else {
		t.denied++
	}
}

// Known checks through POST /v1/check over several apps, interfaces, users
// and minutes; every stats endpoint answers the exact counts, from memory
// before the flush and from MySQL after it.
func TestStatsEndpointsExact(t *testing.T) {
	t.Parallel()
	h := newStatsHarness(t)
	apps := []string{"shop", "blog", "a/b c"} // the last needs escaping in paths
	ifaces := []string{"users.get", "orders.list"}
	app := map[string]*tally{}
	iface := map[[2]string]*tally{}
	user := map[[3]string]*tally{}
	users := map[string]map[string]bool{}
	for m := 0; m < 4; m++ {
		for ai, a := range apps {
			for ii, it := range ifaces {
				for u := 0; u <= ai+1; u++ {
					uid := fmt.Sprintf("user-%d", u)
					for k := 0; k < 1+(m+ii+u)%2; k++ {
						r := h.check(fmt.Sprintf(`{"app_id":%s,"interface_id":%q,"user_id":%q,"ip":"10.0.0.1"}`, jsonString(a), it, uid))
						if r.status != 200 && r.status != 429 {
							t.Fatalf("check: %d %s", r.status, r.raw)
						}
						for _, key := range []any{a, [2]string{a, it}, [3]string{a, uid, it}} {
							var tl *tally
							switch k := key.(type) {
							case string:
								if app[k] == nil {
									app[k] = &tally{}
								}
								tl = app[k]
							case [2]string:
								if iface[k] == nil {
									iface[k] = &tally{}
								}
								tl = iface[k]
							case [3]string:
								if user[k] == nil {
									user[k] = &tally{}
								}
								tl = user[k]
							}
							tl.add(r.status == 200)
						}
						if users[a] == nil {
							users[a] = map[string]bool{}
						}
						users[a][uid] = true
					}
				}
			}
		}
		h.clk.Advance(time.Minute)
	}
	// A dry run and a check without app_id are not calls of any app.
	if r := h.check(`{"app_id":"shop","interface_id":"users.get","user_id":"user-0","dry_run":true}`); r.status != 200 && r.status != 429 {
		t.Fatalf("dry run: %d", r.status)
	}
	h.check(`{"interface_id":"users.get","user_id":"nobody"}`)
	if app["shop"].denied == 0 {
		t.Fatal("the mix denied nothing: the test would not see denied calls")
	}
	date := start.Format(time.DateOnly)

	verify := func(when string) {
		t.Helper()
		for _, a := range apps {
			ea := url.PathEscape(a)
			r := h.get("/v1/apps/"+ea+"/stats?date="+date, adminToken)
			want := app[a]
			if r.status != 200 || r.body["app_id"] != a || r.body["date"] != date ||
				num(r, "calls") != want.calls || num(r, "allowed") != want.allowed || num(r, "denied") != want.denied ||
				num(r, "unique_users") != int64(len(users[a])) {
				t.Errorf("%s: app %q stats %d %s, want %+v and %d users", when, a, r.status, r.raw, *want, len(users[a]))
			}
			list, _ := r.body["interfaces"].([]any)
			if len(list) != len(ifaces) {
				t.Errorf("%s: app %q: %d interfaces", when, a, len(list))
			}
			for _, x := range list {
				m := x.(map[string]any)
				w := iface[[2]string{a, m["interface_id"].(string)}]
				if int64(m["calls"].(float64)) != w.calls || int64(m["denied"].(float64)) != w.denied || int64(m["allowed"].(float64)) != w.allowed {
					t.Errorf("%s: %q interface %v, want %+v", when, a, m, *w)
				}
			}
			// Today is the default date.
			if r2 := h.get("/v1/apps/"+ea+"/stats", adminToken); r2.raw != r.raw {
				t.Errorf("%s: without date: %s, want %s", when, r2.raw, r.raw)
			}
			for _, it := range ifaces {
				r := h.get("/v1/apps/"+ea+"/interfaces/"+url.PathEscape(it)+"/stats?date="+date, adminToken)
				w := iface[[2]string{a, it}]
				if r.status != 200 || r.body["interface_id"] != it || num(r, "calls") != w.calls || num(r, "denied") != w.denied ||
					num(r, "allowed") != w.allowed || num(r, "unique_users") != int64(len(users[a])) {
					t.Errorf("%s: %q/%q: %s, want %+v", when, a, it, r.raw, *w)
				}
			}
			for uid := range users[a] {
				r := h.get("/v1/apps/"+ea+"/users/"+uid+"/stats?date="+date, adminToken)
				var sum tally
				for _, x := range r.body["interfaces"].([]any) {
					m := x.(map[string]any)
					w := user[[3]string{a, uid, m["interface_id"].(string)}]
					if int64(m["calls"].(float64)) != w.calls || int64(m["denied"].(float64)) != w.denied {
						t.Errorf("%s: user %q/%q %v, want %+v", when, a, uid, m, *w)
					}
					sum.calls += w.calls
				}
				if r.status != 200 || r.body["user_id"] != uid || num(r, "calls") != sum.calls {
					t.Errorf("%s: user %q/%q: %s", when, a, uid, r.raw)
				}
			}
			// The curve: 1-minute points (the last 24 h), four of them busy.
			from := start.Truncate(time.Minute).Format(time.RFC3339)
			to := start.Add(10 * time.Minute).Format(time.RFC3339)
			r = h.get("/v1/apps/"+ea+"/series?interface_id=&from="+from+"&to="+to, adminToken)
			pts, _ := r.body["points"].([]any)
			var calls, denied int64
			busy := 0
			for _, p := range pts {
				m := p.(map[string]any)
				calls += int64(m["calls"].(float64))
				denied += int64(m["denied"].(float64))
				if m["calls"].(float64) > 0 {
					busy++
				}
			}
			if r.status != 200 || r.body["resolution"] != "1m" || len(pts) != 10 || busy != 4 || calls != want.calls || denied != want.denied {
				t.Errorf("%s: series of %q: %d res %v, %d points (%d busy), %d calls %d denied; want 10 points, 4 busy, %+v",
					when, a, r.status, r.body["resolution"], len(pts), busy, calls, denied, *want)
			}
			r = h.get("/v1/apps/"+ea+"/series?interface_id=users.get&from="+from+"&to="+to, adminToken)
			calls = 0
			for _, p := range r.body["points"].([]any) {
				calls += int64(p.(map[string]any)["calls"].(float64))
			}
			if calls != iface[[2]string{a, "users.get"}].calls {
				t.Errorf("%s: series of %q users.get: %d calls", when, a, calls)
			}
		}
	}
	verify("before the flush")
	if err := h.rec.Flusher.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	verify("after the flush")
	// A day with no calls answers zeros, not 404.
	r := h.get("/v1/apps/shop/stats?date=2020-01-01", adminToken)
	if r.status != 200 || num(r, "calls") != 0 || len(r.body["interfaces"].([]any)) != 0 {
		t.Fatalf("empty day: %d %s", r.status, r.raw)
	}
}

func TestStatsAuth(t *testing.T) {
	t.Parallel()
	h := newStatsHarness(t)
	keyA := h.mint("app-a")
	keyB := h.mint("app-b")
	if !strings.HasPrefix(keyA, "qk_") || keyA == keyB {
		t.Fatalf("keys %q %q", keyA, keyB)
	}
	if r := h.do("POST", "/v1/admin/apps", "application/json", `{"app_id":"app-a"}`, "Authorization", "Bearer "+adminToken); r.status != 409 || r.errorCode() != "app_exists" {
		t.Fatalf("second mint: %d %s", r.status, r.raw)
	}
	if r := h.do("POST", "/v1/admin/apps", "application/json", `{"app_id":"app-a"}`, "Authorization", "Bearer "+keyA); r.status != 403 {
		t.Fatalf("mint with an app key: %d %s", r.status, r.raw)
	}
	for _, body := range []string{`{}`, `{"app_id":""}`, `{"app_id":5}`, `{"app_id":"x","extra":1}`, `[`, `{"app_id":"x"} {}`} {
		if r := h.do("POST", "/v1/admin/apps", "application/json", body, "Authorization", "Bearer "+adminToken); r.status != 400 || r.errorCode() == "" {
			t.Errorf("mint %s: %d %s", body, r.status, r.raw)
		}
	}
	cases := []struct {
		name, path, token string
		status            int
		code              string
	}{
		{"own app", "/v1/apps/app-a/stats", keyA, 200, ""},
		{"own interface", "/v1/apps/app-a/interfaces/x/stats", keyA, 200, ""},
		{"own user", "/v1/apps/app-a/users/u/stats", keyA, 200, ""},
		{"own series", "/v1/apps/app-a/series", keyA, 200, ""},
		{"other app", "/v1/apps/app-b/stats", keyA, 403, "forbidden"},
		{"other app series", "/v1/apps/app-b/series", keyA, 403, "forbidden"},
		{"other app user", "/v1/apps/app-b/users/u/stats", keyA, 403, "forbidden"},
		{"app without key", "/v1/apps/app-c/stats", keyA, 403, "forbidden"},
		{"no key", "/v1/apps/app-a/stats", "", 401, "unauthorized"},
		{"wrong key", "/v1/apps/app-a/stats", keyA + "x", 401, "unauthorized"},
		{"admin", "/v1/apps/app-b/stats", adminToken, 200, ""},
		{"admin any app", "/v1/apps/never-seen/stats", adminToken, 200, ""},
	}
	for _, c := range cases {
		r := h.get(c.path, c.token)
		if r.status != c.status || (c.code != "" && r.errorCode() != c.code) {
			t.Errorf("%s: GET %s: %d %s, want %d %s", c.name, c.path, r.status, r.raw, c.status, c.code)
		}
	}
	r := h.get("/v1/apps", keyB)
	if r.status != 200 || r.body["admin"] != false || len(r.body["apps"].([]any)) != 1 {
		t.Fatalf("apps for a key: %s", r.raw)
	}
	r = h.get("/v1/apps", adminToken)
	if r.status != 200 || r.body["admin"] != true || len(r.body["apps"].([]any)) != 2 {
		t.Fatalf("apps for the admin: %s", r.raw)
	}
	// Rotation: the old key stops working, the new one reads.
	r = h.do("POST", "/v1/admin/apps", "application/json", `{"app_id":"app-a","rotate":true}`, "Authorization", "Bearer "+adminToken)
	if r.status != 201 {
		t.Fatalf("rotate: %d %s", r.status, r.raw)
	}
	if r2 := h.get("/v1/apps/app-a/stats", keyA); r2.status != 401 {
		t.Fatalf("old key after rotation: %d", r2.status)
	}
	if r2 := h.get("/v1/apps/app-a/stats", r.body["key"].(string)); r2.status != 200 {
		t.Fatalf("new key after rotation: %d", r2.status)
	}
}

func TestStatsBadInput(t *testing.T) {
	t.Parallel()
	h := newStatsHarness(t)
	now := start
	long := url.QueryEscape(now.Add(-400 * 24 * time.Hour).Format(time.RFC3339))
	cases := []struct{ path, code string }{
		{"/v1/apps/a/stats?date=2026-13-01", "invalid_date"},
		{"/v1/apps/a/stats?date=yesterday", "invalid_date"},
		{"/v1/apps/a/stats?date=2026-1-1", "invalid_date"},
		{"/v1/apps/a/interfaces/i/stats?date=20261123", "invalid_date"},
		{"/v1/apps/a/users/u/stats?date=2026-02-30", "invalid_date"},
		{"/v1/apps/a/series?from=2026-11-23T10:00:00Z&to=2026-11-22T10:00:00Z", "invalid_range"},
		{"/v1/apps/a/series?from=noon", "invalid_time"},
		{"/v1/apps/a/series?to=2026-11-23", "invalid_time"},
		{"/v1/apps/a/series?from=" + long + "&resolution=1m", "range_too_long"},
		{"/v1/apps/a/series?resolution=2m", "invalid_resolution"},
		{"/v1/apps/a/uniques?from=2026-11-23&to=2026-11-01", "invalid_range"},
		{"/v1/apps/a/uniques?from=2024-01-01&to=2026-11-01", "range_too_long"},
		{"/v1/apps/" + strings.Repeat("x", 257) + "/stats", "invalid_app_id"},
	}
	for _, c := range cases {
		r := h.get(c.path, adminToken)
		e, _ := r.body["error"].(map[string]any)
		if r.status != 400 || r.errorCode() != c.code || e["message"] == "" {
			t.Errorf("GET %s: %d %s, want 400 %s", c.path, r.status, r.raw, c.code)
		}
	}
	// A year back is answered at 1-week resolution.
	r := h.get("/v1/apps/a/series?from="+long, adminToken)
	if r.status != 200 || r.body["resolution"] != "1w" {
		t.Fatalf("400 days back: %d %v", r.status, r.body["resolution"])
	}
	for back, res := range map[time.Duration]string{time.Hour: "1m", 3 * 24 * time.Hour: "5m", 20 * 24 * time.Hour: "1h"} {
		r := h.get("/v1/apps/a/series?from="+url.QueryEscape(now.Add(-back).Format(time.RFC3339)), adminToken)
		if r.body["resolution"] != res {
			t.Errorf("%s back: resolution %v, want %s", back, r.body["resolution"], res)
		}
	}
	// The chart is SVG.
	req, _ := http.NewRequest("GET", h.srv.URL+"/v1/apps/a/series.svg?from="+long, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), "image/svg+xml") || !strings.HasPrefix(string(body), "<svg") {
		t.Fatalf("series.svg: %d %s %.80s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
}
