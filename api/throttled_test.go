package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// throttledAnswer is GET /v1/apps/{app_id}/throttled's body.
type throttledAnswer struct {
	AppID string `json:"app_id"`
	Date  string `json:"date"`
	Rules []struct {
		Rule string `json:"rule"`
		Top  []struct {
			Dimensions   map[string]string `json:"dimensions"`
			Denied       int64             `json:"denied"`
			MaxOvercount *int64            `json:"max_overcount"`
		} `json:"top"`
	} `json:"rules"`
	Interfaces []struct {
		InterfaceID string `json:"interface_id"`
		Denied      int64  `json:"denied"`
	} `json:"interfaces"`
}

// Known denials through POST /v1/check and /v1/check/batch (limit 3 an
// hour per app, user and interface): the endpoint lists each denied
// identity with its exact count and the denied interfaces, most denied
// first, from memory before the flush and from MySQL after it; another
// app's denials and dry runs are not counted.
func TestThrottled_ListsTheMostDeniedIdentitiesAndInterfacesOfTheDay(t *testing.T) {
	t.Parallel()
	h := newStatsHarness(t)
	calls := []struct {
		app, user, iface string
		n                int
	}{
		{"shop", "u1", "orders.list", 10}, // 7 denied
		{"shop", "u2", "orders.list", 5},  // 2
		{"shop", "u3", "users.get", 4},    // 1
		{"shop", "u4", "users.get", 3},    // none
		{"blog", "u1", "orders.list", 12}, // another app's 9
	}
	for _, c := range calls {
		body := `{"app_id":"` + c.app + `","user_id":"` + c.user + `","interface_id":"` + c.iface + `"}`
		for range c.n / 2 {
			h.check(body)
		}
		batch := `{"checks":[` + strings.TrimSuffix(strings.Repeat(body+",", c.n-c.n/2), ",") + `]}`
		if r := h.do("POST", "/v1/check/batch", "application/json", batch); r.status != 200 {
			t.Fatalf("batch: %d %s", r.status, r.raw)
		}
	}
	h.check(`{"app_id":"shop","user_id":"u1","interface_id":"orders.list","dry_run":true}`)
	want := `{"app_id":"shop","date":"2026-11-23","rules":[{"rule":"app_user_iface_hourly","top":[` +
		`{"dimensions":{"app_id":"shop","interface_id":"orders.list","user_id":"u1"},"denied":7},` +
		`{"dimensions":{"app_id":"shop","interface_id":"orders.list","user_id":"u2"},"denied":2},` +
		`{"dimensions":{"app_id":"shop","interface_id":"users.get","user_id":"u3"},"denied":1}]}],` +
		`"interfaces":[{"interface_id":"orders.list","denied":9},{"interface_id":"users.get","denied":1}]}`
	for _, when := range []string{"before the flush", "after the flush"} {
		if when == "after the flush" {
			ctx := context.Background()
			if err := h.rec.Flusher.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if err := h.rec.Throttled.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		r := h.get("/v1/apps/shop/throttled?date=2026-11-23", adminToken)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", when, r.status, r.raw)
		}
		var got throttledAnswer
		if err := json.Unmarshal([]byte(r.raw), &got); err != nil {
			t.Fatal(err)
		}
		canon, _ := json.Marshal(got)
		var wantAns throttledAnswer
		_ = json.Unmarshal([]byte(want), &wantAns)
		wantCanon, _ := json.Marshal(wantAns)
		if string(canon) != string(wantCanon) {
			t.Errorf("%s:\n got %s\nwant %s", when, r.raw, want)
		}
	}
	// ?top= cuts both lists; no date is today.
	r := h.get("/v1/apps/shop/throttled?top=1", adminToken)
	var got throttledAnswer
	if err := json.Unmarshal([]byte(r.raw), &got); err != nil || r.status != 200 {
		t.Fatalf("top=1: %d %s", r.status, r.raw)
	}
	if got.Date != "2026-11-23" || len(got.Rules) != 1 || len(got.Rules[0].Top) != 1 || got.Rules[0].Top[0].Denied != 7 ||
		len(got.Interfaces) != 1 || got.Interfaces[0].Denied != 9 {
		t.Errorf("top=1: %s", r.raw)
	}
	// A day without denials: empty lists, not null.
	if r := h.get("/v1/apps/shop/throttled?date=2026-11-01", adminToken); r.status != 200 || !strings.Contains(r.raw, `"rules":[]`) || !strings.Contains(r.raw, `"interfaces":[]`) {
		t.Errorf("a day without denials: %d %s", r.status, r.raw)
	}
}

// The app's own key or the admin token read it; another app's key is a
// 403, no token a 401; a bad date or top is a 400 with the error shape.
func TestThrottled_AuthAndBadInputAreClear4xx(t *testing.T) {
	t.Parallel()
	h := newStatsHarness(t)
	keyShop, keyBlog := h.mint("shop"), h.mint("blog")
	for _, tc := range []struct {
		name, path, token string
		status            int
		code              string
	}{
		{"own key", "/v1/apps/shop/throttled", keyShop, 200, ""},
		{"admin token", "/v1/apps/shop/throttled?date=2026-11-23", adminToken, 200, ""},
		{"another app's key", "/v1/apps/shop/throttled", keyBlog, 403, "forbidden"},
		{"no token", "/v1/apps/shop/throttled", "", 401, "unauthorized"},
		{"unknown token", "/v1/apps/shop/throttled", "qk_nope", 401, "unauthorized"},
		{"month 13", "/v1/apps/shop/throttled?date=2026-13-01", adminToken, 400, "invalid_date"},
		{"not a date", "/v1/apps/shop/throttled?date=yesterday", keyShop, 400, "invalid_date"},
		{"top 0", "/v1/apps/shop/throttled?top=0", adminToken, 400, "invalid_top"},
		{"top 101", "/v1/apps/shop/throttled?top=101", adminToken, 400, "invalid_top"},
		{"top not a number", "/v1/apps/shop/throttled?top=ten", adminToken, 400, "invalid_top"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.get(tc.path, tc.token)
			if r.status != tc.status || r.errorCode() != tc.code {
				t.Fatalf("GET %s: %d %s, want %d %q", tc.path, r.status, r.raw, tc.status, tc.code)
			}
			if tc.status >= 400 {
				if e, _ := r.body["error"].(map[string]any); e["message"] == "" {
					t.Fatalf("no message: %s", r.raw)
				}
			}
		})
	}
}
