package api_test

import (
	"net/http"
	"testing"

	"github.com/dunglas/httpsfv"

	"github.com/quota-platform/quota/config"
)

// sfItems parses a structured-field List with httpsfv and checks that
// serialising it again gives back the header byte for byte (our writer
// emits the canonical form); it returns each item's name and integer
// parameters.
func sfItems(t *testing.T, field string, h http.Header) map[string]map[string]int64 {
	t.Helper()
	vals := h.Values(field)
	if len(vals) != 1 {
		t.Fatalf("%s: %d field lines, want 1: %q", field, len(vals), vals)
	}
	list, err := httpsfv.UnmarshalList(vals)
	if err != nil {
		t.Fatalf("%s %q is not a structured-field List: %v", field, vals[0], err)
	}
	if again, err := httpsfv.Marshal(list); err != nil || again != vals[0] {
		t.Fatalf("%s %q: serialised again %q (%v)", field, vals[0], again, err)
	}
	out := map[string]map[string]int64{}
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		if !ok {
			t.Fatalf("%s: member %#v is not an Item", field, m)
		}
		name, ok := item.Value.(string)
		if !ok {
			t.Fatalf("%s: item value %#v is not an sf-string", field, item.Value)
		}
		params := map[string]int64{}
		for _, k := range item.Params.Names() {
			v, _ := item.Params.Get(k)
			n, ok := v.(int64)
			if !ok {
				t.Fatalf("%s: parameter %s=%#v is not an Integer", field, k, v)
			}
			params[k] = n
		}
		out[name] = params
	}
	return out
}

const multiLimitRules = `
rules:
  - name: app_ip_hourly
    dimensions: [app_id, ip]
    limit: 10000
    window: 1h
    algorithm: fixed_window
  - name: login_per_user
    dimensions: [user_id]
    limits: [{limit: 1, window: 1s}, {limit: 5, window: 1h}]
    algorithm: sliding_window
`

func TestHeaders_DraftFieldsAreValidStructuredFieldsNamedAfterRules(t *testing.T) {
	t.Parallel()
	h := newHarness(t, multiLimitRules, settings(func(s *config.Settings) { s.Headers = config.HeadersDraft }))
	for _, path := range []string{"/v1/check", "/v1/auth"} {
		var r reply
		if path == "/v1/check" {
			r = h.check(`{"app_id":"a1","ip":"192.0.2.1","user_id":"u` + path + `"}`)
		} else {
			r = h.auth("GET", "X-App-Id", "a1", "X-Real-IP", "192.0.2.1", "X-User-Id", "u"+path)
		}
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", path, r.status, r.raw)
		}
		policy := sfItems(t, "RateLimit-Policy", r.header)
		limit := sfItems(t, "RateLimit", r.header)
		wantPolicy := map[string]map[string]int64{
			"app_ip_hourly":     {"q": 10000, "w": 3600},
			"login_per_user/1s": {"q": 1, "w": 1},
			"login_per_user/1h": {"q": 5, "w": 3600},
		}
		remaining := map[string]int64{"app_ip_hourly": 9999, "login_per_user/1s": 0, "login_per_user/1h": 4}
		if path == "/v1/auth" {
			remaining["app_ip_hourly"] = 9998
		}
		for name, want := range wantPolicy {
			if got := policy[name]; got["q"] != want["q"] || got["w"] != want["w"] || len(got) != 2 {
				t.Errorf("%s: policy %s = %v, want %v", path, name, got, want)
			}
			if got := limit[name]; got["r"] != remaining[name] || len(got) != 2 || got["t"] < 1 || got["t"] > want["w"] {
				t.Errorf("%s: RateLimit %s = %v, want r=%d and 1 <= t <= %d", path, name, got, remaining[name], want["w"])
			}
		}
		if len(policy) != 3 || len(limit) != 3 {
			t.Errorf("%s: %d policies and %d limits, want 3 each: %v", path, len(policy), len(limit), r.header)
		}
		if r.header.Get("RateLimit-Limit") != "" {
			t.Errorf("%s: QUOTA_HEADERS=draft sent the legacy headers too", path)
		}
	}
	// Fixed windows: the exact strings (the clock is 250 ms into the hour).
	r := h.check(`{"app_id":"a2","ip":"192.0.2.1"}`)
	if got, want := r.header.Get("RateLimit-Policy"), `"app_ip_hourly";q=10000;w=3600`; got != want {
		t.Errorf("RateLimit-Policy %q, want %q", got, want)
	}
	if got, want := r.header.Get("RateLimit"), `"app_ip_hourly";r=9999;t=3600`; got != want {
		t.Errorf("RateLimit %q, want %q", got, want)
	}
}

func TestHeaders_DraftDenialKeepsRetryAfter(t *testing.T) {
	t.Parallel()
	h := newHarness(t, oneRule, settings(func(s *config.Settings) { s.Headers = config.HeadersDraft }))
	h.check(`{"user_id":"u"}`)
	h.check(`{"user_id":"u"}`)
	r := h.check(`{"user_id":"u"}`)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "3600" || r.header.Get("RateLimit") != `"two";r=0;t=3600` {
		t.Fatalf("denied: %d %v", r.status, r.header)
	}
}

func TestHeaders_StyleChoosesTheSets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		style         config.HeaderStyle
		legacy, draft bool
	}{
		{config.HeadersLegacy, true, false},
		{config.HeadersDraft, false, true},
		{config.HeadersBoth, true, true},
	} {
		t.Run(string(tc.style), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, oneRule, settings(func(s *config.Settings) { s.Headers = tc.style }))
			for _, r := range []reply{h.check(`{"user_id":"u"}`), h.auth("GET", "X-User-Id", "v")} {
				if got := r.header.Get("RateLimit-Remaining") == "1"; got != tc.legacy {
					t.Errorf("legacy headers %v, want %v: %v", got, tc.legacy, r.header)
				}
				if got := r.header.Get("RateLimit") == `"two";r=1;t=3600` && r.header.Get("RateLimit-Policy") == `"two";q=2;w=3600`; got != tc.draft {
					t.Errorf("draft headers %v, want %v: %v", got, tc.draft, r.header)
				}
			}
		})
	}
}
