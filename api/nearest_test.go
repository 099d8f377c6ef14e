package api_test

import (
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"
)

const nearestYAML = `
rules:
  - {name: user_month, dimensions: [app_id, user_id], limit: 10, window: month, algorithm: fixed_window}
  - {name: app_day, dimensions: [app_id], limit: 1000, window: day, algorithm: fixed_window}
  - {name: user_minute, dimensions: [app_id, user_id], limit: 1000, window: 1m, algorithm: fixed_window}
plans:
  pro: {user_month: 20}
`

type nearestAnswer struct {
	AppID string `json:"app_id"`
	Rules []struct {
		Rule         string `json:"rule"`
		Window       string `json:"window"`
		Limit        int64  `json:"limit"`
		ResetAfterMs int64  `json:"reset_after_ms"`
		Top          []struct {
			Dimensions map[string]string `json:"dimensions"`
			Used       int64             `json:"used"`
			Remaining  int64             `json:"remaining"`
		} `json:"top"`
	} `json:"rules"`
}

// nearestUsers is GET /v1/apps/{app}/usage/nearest's list of one quota as
// "user:used", waiting (for the record is written off the check path)
// until it equals want.
func (h *harness) nearestUsers(path string, want []string) nearestAnswer {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := h.admin("GET", path, "")
		var a nearestAnswer
		if r.status != 200 || json.Unmarshal([]byte(r.raw), &a) != nil || len(a.Rules) != 1 {
			h.t.Fatalf("%s: %d %s", path, r.status, r.raw)
		}
		got := []string{}
		for _, id := range a.Rules[0].Top {
			got = append(got, id.Dimensions["user_id"]+":"+strconv.FormatInt(id.Used, 10))
		}
		if reflect.DeepEqual(got, want) {
			return a
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: %v, want %v (%s)", path, got, want, r.raw)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The identities nearest their calendar quota are those past half of it,
// most used first, with exact figures read from the counters; an app's own
// quota and non-calendar limits are not listed; an app's plan sets the
// limit; ?top= bounds the list and is validated; the answer counts nothing.
func TestNearest_ListsTheIdentitiesPastHalfTheirQuotaMostUsedFirst(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nearestYAML, withPlans(), withNearest())
	calls := map[string]int{"u1": 12, "u2": 8, "u3": 5, "u4": 4, "u5": 1}
	for user, n := range calls {
		for range n {
			h.check(`{"app_id":"a1","user_id":"` + user + `"}`)
		}
	}
	a := h.nearestUsers("/v1/apps/a1/usage/nearest", []string{"u1:10", "u2:8", "u3:5"})
	q := a.Rules[0]
	monthEnd := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if a.AppID != "a1" || q.Rule != "user_month" || q.Window != "month" || q.Limit != 10 || q.ResetAfterMs != monthEnd.Sub(start).Milliseconds() {
		t.Fatalf("answer %+v", a)
	}
	for _, id := range q.Top {
		if id.Remaining != 10-id.Used || len(id.Dimensions) != 1 {
			t.Errorf("identity %+v", id)
		}
	}
	before := h.snapshot()
	h.nearestUsers("/v1/apps/a1/usage/nearest?top=2", []string{"u1:10", "u2:8"})
	if after := h.snapshot(); !reflect.DeepEqual(before, after) {
		t.Fatal("reading the nearest changed a count")
	}
	for _, bad := range []string{"0", "51", "x", "-1"} {
		if r := h.admin("GET", "/v1/apps/a1/usage/nearest?top="+bad, ""); r.status != 400 || r.errorCode() != "invalid_top" {
			t.Errorf("top=%s: %d %s", bad, r.status, r.raw)
		}
	}
	if r := h.do("GET", "/v1/apps/a1/usage/nearest", "", ""); r.status != 401 {
		t.Errorf("no key: %d", r.status)
	}
	// a2 on pro (20 a month): 12 calls are past half, 8 are not.
	if r := h.admin("PUT", "/v1/admin/apps/a2/plan", `{"plan":"pro"}`); r.status != 200 {
		t.Fatalf("plan: %d %s", r.status, r.raw)
	}
	for user, n := range map[string]int{"v1": 12, "v2": 8} {
		for range n {
			h.check(`{"app_id":"a2","user_id":"` + user + `"}`)
		}
	}
	if a := h.nearestUsers("/v1/apps/a2/usage/nearest", []string{"v1:12"}); a.Rules[0].Limit != 20 || a.Rules[0].Top[0].Remaining != 8 {
		t.Fatalf("a2: %+v", a)
	}
	h.nearestUsers("/v1/apps/a3/usage/nearest", []string{})
}
