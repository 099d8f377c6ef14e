package api_test

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

const plansYAML = `
rules:
  - name: app_daily
    dimensions: [app_id]
    limit: 5
    window: day
    algorithm: fixed_window
  - name: app_user_iface_hourly
    dimensions: [app_id, user_id, interface_id]
    limit: 3
    window: 1h
    algorithm: fixed_window
  - name: ip_minute
    dimensions: [ip]
    limit: 100
    window: 1m
    algorithm: fixed_window
plans:
  pro: {app_daily: 8}
  partner: {app_daily: {limits: [{limit: 2, window: 1s}, {limit: 1000, window: month}]}}
`

func (h *harness) admin(method, path, body string) reply {
	h.t.Helper()
	return h.do(method, path, "application/json", body, "Authorization", "Bearer "+adminToken)
}

// The admin API puts apps on plans and overrides one limit; what it
// refuses is a 400 that changes nothing, and a check then counts once per
// rule against the limit that applies, which its answer and headers show.
func TestPlanAdmin_ChangesLimitsAndRefusesBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, plansYAML, withPlans())
	if r := h.admin("PUT", "/v1/admin/apps/a1/plan", `{"plan":"pro"}`); r.status != 200 || r.body["plan"] != "pro" {
		t.Fatalf("put plan: %d %s", r.status, r.raw)
	}
	before := h.snapshot()
	bad := []struct{ method, path, body, code string }{
		{"PUT", "/v1/admin/apps/a1/plan", `{"plan":"gold"}`, "unknown_plan"},
		{"PUT", "/v1/admin/apps/a1/plan", `{"plan":5}`, "invalid_json"},
		{"PUT", "/v1/admin/apps/a1/plan", `{"plan":"pro","x":1}`, "invalid_json"},
		{"PUT", "/v1/admin/apps/a1/overrides/app_daily", `{"limit":0}`, "invalid_override"},
		{"PUT", "/v1/admin/apps/a1/overrides/app_daily", `{"limit":-4}`, "invalid_override"},
		{"PUT", "/v1/admin/apps/a1/overrides/app_daily", `{"limit":1.5}`, "invalid_json"},
		{"PUT", "/v1/admin/apps/a1/overrides/app_daily", `{"limit":"ten"}`, "invalid_json"},
		{"PUT", "/v1/admin/apps/a1/overrides/app_daily", `{"limits":[{"limit":3,"window":"fortnight"}]}`, "invalid_json"},
		{"PUT", "/v1/admin/apps/a1/overrides/nope", `{"limit":4}`, "invalid_override"},
		{"PUT", "/v1/admin/apps/a1/overrides/ip_minute", `{"limit":4}`, "invalid_override"},
		{"PUT", "/v1/admin/apps/a1/overrides/Bad-Name", `{"limit":4}`, "invalid_rule"},
	}
	for _, b := range bad {
		r := h.admin(b.method, b.path, b.body)
		if code, _ := r.body["error"].(map[string]any)["code"].(string); r.status != 400 || code != b.code {
			t.Errorf("%s %s %s: %d %s, want 400 %s", b.method, b.path, b.body, r.status, r.raw, b.code)
		}
	}
	if r := h.do("PUT", "/v1/admin/apps/a1/plan", "application/json", `{"plan":"partner"}`); r.status != 401 {
		t.Errorf("no admin token: %d", r.status)
	}
	if after := h.snapshot(); !reflect.DeepEqual(before, after) {
		t.Fatalf("refused requests changed the store:\nbefore %v\nafter  %v", before, after)
	}
	if r := h.admin("GET", "/v1/admin/apps/a1/plan", ""); r.body["plan"] != "pro" || len(r.body["overrides"].(map[string]any)) != 0 {
		t.Fatalf("get plan: %s", r.raw)
	}
	// a1 on pro: 8 a day; a2 on no plan: 5; a3 overridden to 2.
	if r := h.admin("PUT", "/v1/admin/apps/a3/overrides/app_daily", `{"limit":2}`); r.status != 200 {
		t.Fatalf("put override: %d %s", r.status, r.raw)
	}
	for app, limit := range map[string]int{"a1": 8, "a2": 5, "a3": 2} {
		allowed := 0
		var last reply
		for range 10 {
			last = h.check(`{"app_id":"` + app + `"}`)
			if last.allowed() {
				allowed++
			}
		}
		if allowed != limit {
			t.Errorf("%s: %d allowed, want %d", app, allowed, limit)
		}
		e := last.entry(t, "app_daily")
		if e["limit"] != float64(limit) || e["window"] != "day" || last.header.Get("RateLimit-Limit") != strconv.Itoa(limit) {
			t.Errorf("%s: entry %v, RateLimit-Limit %q; want the limit %d", app, e, last.header.Get("RateLimit-Limit"), limit)
		}
		if len(last.body["rules"].([]any)) != 1 {
			t.Errorf("%s: counted against %d entries, want one per rule", app, len(last.body["rules"].([]any)))
		}
	}
	if r := h.admin("DELETE", "/v1/admin/apps/a3/overrides/app_daily", ""); r.status != 204 {
		t.Fatalf("delete override: %d %s", r.status, r.raw)
	}
	if r := h.check(`{"app_id":"a3","dry_run":true}`); r.entry(t, "app_daily")["limit"] != float64(5) {
		t.Fatalf("after the delete: %s", r.raw)
	}
}

// Usage reports each app-level limit's use, and with a dimension that
// identity's limits, counting nothing.
func TestUsage_ReportsWhatChecksCountedAndCountsNothing(t *testing.T) {
	t.Parallel()
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, plansYAML, withPlans(), inZone(shanghai))
	if r := h.admin("PUT", "/v1/admin/apps/a1/plan", `{"plan":"partner"}`); r.status != 200 {
		t.Fatal(r.raw)
	}
	for range 2 {
		h.check(`{"app_id":"a1","user_id":"u1","interface_id":"users.get"}`)
	}
	h.check(`{"app_id":"a1","user_id":"u2","interface_id":"users.get"}`)
	before := h.snapshot()
	r := h.admin("GET", "/v1/apps/a1/usage", "")
	if r.status != 200 || r.body["plan"] != "partner" || r.body["app_id"] != "a1" {
		t.Fatalf("usage: %d %s", r.status, r.raw)
	}
	limits := r.body["limits"].([]any)
	// start is 10:00:00.25 UTC, 18:00:00.25 in Shanghai: the month ends
	// on 1 December at 00:00 Shanghai, 16:00 UTC on 30 November.
	monthEnd := time.Date(2026, 11, 30, 16, 0, 0, 0, time.UTC).Sub(start).Milliseconds()
	want := []map[string]any{
		{"rule": "app_daily", "window": "1s", "limit": 2.0, "used": 2.0, "remaining": 0.0, "reset_after_ms": 750.0, "tier": "hot"}, // the frozen clock is still in that second
		{"rule": "app_daily", "window": "month", "limit": 1000.0, "used": 2.0, "remaining": 998.0, "reset_after_ms": float64(monthEnd), "tier": "hot"},
	}
	if len(limits) != len(want) {
		t.Fatalf("limits %s", r.raw)
	}
	for i := range want {
		if !reflect.DeepEqual(limits[i], any(want[i])) {
			t.Errorf("limit %d: %v, want %v", i, limits[i], want[i])
		}
	}
	// The 1s limit saw 3 checks at one instant, 2 allowed: the month counted 2.
	r = h.admin("GET", "/v1/apps/a1/usage?user_id=u1&interface_id=users.get", "")
	var hourly map[string]any
	for _, l := range r.body["limits"].([]any) {
		if l.(map[string]any)["rule"] == "app_user_iface_hourly" {
			hourly = l.(map[string]any)
		}
	}
	if hourly == nil || hourly["used"] != 2.0 || hourly["remaining"] != 1.0 || hourly["limit"] != 3.0 {
		t.Fatalf("u1's hourly: %v in %s", hourly, r.raw)
	}
	if after := h.snapshot(); !reflect.DeepEqual(before, after) {
		t.Fatalf("usage changed the store:\nbefore %v\nafter  %v", before, after)
	}
	for _, q := range []string{"?cost=1", "?Bad=1", "?app_id=x", "?user_id=a&user_id=b"} {
		if r := h.admin("GET", "/v1/apps/a1/usage"+q, ""); r.status != 400 {
			t.Errorf("usage%s: %d %s, want 400", q, r.status, r.raw)
		}
	}
	if r := h.do("GET", "/v1/apps/a1/usage", "", ""); r.status != 401 {
		t.Errorf("usage without a key: %d", r.status)
	}
}

// PUT /v1/rules may not drop a plan apps are on: 400, nothing changes.
func TestPutRules_RefusesToDropAPlanAppsAreOn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, plansYAML, withPlans())
	if r := h.admin("PUT", "/v1/admin/apps/a1/plan", `{"plan":"partner"}`); r.status != 200 {
		t.Fatal(r.raw)
	}
	before := h.lim.Rules().Version
	withoutPartner := `{"rules":[{"name":"app_daily","dimensions":["app_id"],"limit":5,"window":"day","algorithm":"fixed_window"}],"plans":{"pro":{"app_daily":8}}}`
	r := h.admin("PUT", "/v1/rules", withoutPartner)
	if r.status != 400 || !strings.Contains(r.raw, `plan \"partner\" is dropped but 1 app(s) are on it`) {
		t.Fatalf("put: %d %s", r.status, r.raw)
	}
	if h.lim.Rules().Version != before {
		t.Fatal("the refused rules were put in force")
	}
	if r := h.admin("PUT", "/v1/admin/apps/a1/plan", `{"plan":null}`); r.status != 200 || r.body["plan"] != "default" {
		t.Fatalf("back to default: %d %s", r.status, r.raw)
	}
	if r := h.admin("PUT", "/v1/rules", withoutPartner); r.status != 200 || r.body["plans"] == nil {
		t.Fatalf("put once no app is on it: %d %s", r.status, r.raw)
	}
}
