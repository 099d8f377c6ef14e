package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func TestBadInput_IsA4xxWithTheErrorBodyAndChangesNoCount(t *testing.T) {
	t.Parallel()
	h := newHarness(t, defaultRules)
	if r := h.check(call); r.status != 200 {
		t.Fatalf("setup: %s", r.raw)
	}
	long := strings.Repeat("x", 257)
	oneItem := `{"app_id":"a1","user_id":"u42","interface_id":"users.get"}`
	manyItems := "{\"checks\":[" + strings.TrimSuffix(strings.Repeat(oneItem+",", 1001), ",") + "]}"
	cases := []struct {
		name, method, path, ctype, body string
		status                          int
		code                            string
	}{
		{"malformed json", "POST", "/v1/check", "application/json", `{"app_id":"a1",`, 400, "malformed_json"},
		{"empty body", "POST", "/v1/check", "application/json", ``, 400, "malformed_json"},
		{"array body", "POST", "/v1/check", "application/json", `[{"app_id":"a1"}]`, 400, "invalid_body"},
		{"string body", "POST", "/v1/check", "application/json", `"hello"`, 400, "invalid_body"},
		{"trailing data", "POST", "/v1/check", "application/json", call + `{}`, 400, "malformed_json"},
		{"form content type", "POST", "/v1/check", "application/x-www-form-urlencoded", call, 415, "unsupported_media_type"},
		{"text content type", "POST", "/v1/check", "text/plain", call, 415, "unsupported_media_type"},
		{"body over 64 KiB", "POST", "/v1/check", "application/json", `{"app_id":"` + strings.Repeat("a", 70000) + `"}`, 413, "body_too_large"},
		{"cost 0", "POST", "/v1/check", "application/json", `{"app_id":"a1","ip":"1","cost":0}`, 400, "invalid_cost"},
		{"cost negative", "POST", "/v1/check", "application/json", `{"app_id":"a1","ip":"1","cost":-3}`, 400, "invalid_cost"},
		{"cost fractional", "POST", "/v1/check", "application/json", `{"app_id":"a1","ip":"1","cost":1.5}`, 400, "invalid_cost"},
		{"cost 1.0", "POST", "/v1/check", "application/json", `{"app_id":"a1","ip":"1","cost":1.0}`, 400, "invalid_cost"},
		{"cost exponent", "POST", "/v1/check", "application/json", `{"app_id":"a1","ip":"1","cost":1e3}`, 400, "invalid_cost"},
		{"cost string", "POST", "/v1/check", "application/json", `{"app_id":"a1","ip":"1","cost":"5"}`, 400, "invalid_cost"},
		{"cost over a million", "POST", "/v1/check", "application/json", `{"app_id":"a1","ip":"1","cost":1000001}`, 400, "invalid_cost"},
		{"cost huge", "POST", "/v1/check", "application/json", `{"app_id":"a1","ip":"1","cost":99999999999999999999999}`, 400, "invalid_cost"},
		{"empty value", "POST", "/v1/check", "application/json", `{"app_id":"","ip":"1"}`, 400, "invalid_dimension"},
		{"value over 256 bytes", "POST", "/v1/check", "application/json", `{"app_id":"` + long + `","ip":"1"}`, 400, "invalid_dimension"},
		{"value not utf-8", "POST", "/v1/check", "application/json", "{\"app_id\":\"a\xff\xfe\",\"ip\":\"1\"}", 400, "invalid_encoding"},
		{"lone surrogate", "POST", "/v1/check", "application/json", `{"app_id":"\ud800","ip":"1"}`, 400, "invalid_encoding"},
		{"value a number", "POST", "/v1/check", "application/json", `{"app_id":5,"ip":"1"}`, 400, "invalid_dimension"},
		{"value an object", "POST", "/v1/check", "application/json", `{"app_id":{"x":1},"ip":"1"}`, 400, "invalid_dimension"},
		{"value null", "POST", "/v1/check", "application/json", `{"app_id":null,"ip":"1"}`, 400, "invalid_dimension"},
		{"dimension name upper case", "POST", "/v1/check", "application/json", `{"App":"a1"}`, 400, "invalid_dimension"},
		{"dimension name with dash", "POST", "/v1/check", "application/json", `{"app-id":"a1"}`, 400, "invalid_dimension"},
		{"dimension name too long", "POST", "/v1/check", "application/json", `{"a` + strings.Repeat("b", 32) + `":"x"}`, 400, "invalid_dimension"},
		{"duplicate field", "POST", "/v1/check", "application/json", `{"app_id":"a1","app_id":"a2"}`, 400, "invalid_field"},
		{"dry_run not a bool", "POST", "/v1/check", "application/json", `{"app_id":"a1","dry_run":"yes"}`, 400, "invalid_field"},
		{"dry_run and report", "POST", "/v1/check", "application/json", `{"app_id":"a1","dry_run":true,"report":true}`, 400, "invalid_field"},
		{"batch of 0", "POST", "/v1/check/batch", "application/json", `{"checks":[]}`, 400, "invalid_batch"},
		{"batch over 1000", "POST", "/v1/check/batch", "application/json", manyItems, 400, "invalid_batch"},
		{"batch without checks", "POST", "/v1/check/batch", "application/json", `{}`, 400, "invalid_body"},
		{"batch checks not array", "POST", "/v1/check/batch", "application/json", `{"checks":{}}`, 400, "invalid_body"},
		{"batch unknown field", "POST", "/v1/check/batch", "application/json", `{"checks":[` + oneItem + `],"x":1}`, 400, "invalid_field"},
		{"batch one bad item", "POST", "/v1/check/batch", "application/json", `{"checks":[` + oneItem + `,{"app_id":"a1","cost":0}]}`, 400, "invalid_cost"},
		{"unknown path", "GET", "/v1/nothing", "", ``, 404, "not_found"},
		{"unknown path post", "POST", "/v2/check", "application/json", call, 404, "not_found"},
		{"wrong method on check", "GET", "/v1/check", "", ``, 405, "method_not_allowed"},
		{"wrong method on batch", "DELETE", "/v1/check/batch", "", ``, 405, "method_not_allowed"},
		{"wrong method on rules", "POST", "/v1/rules", "application/json", `{}`, 405, "method_not_allowed"},
	}
	before := h.snapshot()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do(tc.method, tc.path, tc.ctype, tc.body)
			if r.status != tc.status || r.errorCode() != tc.code {
				t.Fatalf("status %d code %q, want %d %q (body %.200s)", r.status, r.errorCode(), tc.status, tc.code, r.raw)
			}
			e := r.body["error"].(map[string]any)
			if msg, _ := e["message"].(string); msg == "" {
				t.Errorf("error without a message: %s", r.raw)
			}
			if r.header.Get("Content-Type") != "application/json" {
				t.Errorf("content type %q", r.header.Get("Content-Type"))
			}
		})
	}
	if after := h.snapshot(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("bad input changed counts:\nbefore %v\nafter  %v", before, after)
	}
	t.Run("the batch error names the item", func(t *testing.T) {
		r := h.do("POST", "/v1/check/batch", "application/json", `{"checks":[`+oneItem+`,`+oneItem+`,{"ip":7}]}`)
		msg := r.body["error"].(map[string]any)["message"].(string)
		if r.status != http.StatusBadRequest || !strings.Contains(msg, "checks[2]") {
			t.Fatalf("%d %s", r.status, r.raw)
		}
	})
}

func TestCheck_EscapedAndOddValuesAreAccepted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
rules:
  - name: one
    dimensions: [user_id]
    limit: 1
    window: 1h
    algorithm: fixed_window
`)
	// Each value is a distinct identity; the escaped spelling of one is the same identity.
	values := []string{`a|b`, `{x}`, `'; DROP TABLE cold_counters; --`, strings.Repeat("é", 128), `tab\there`}
	for _, v := range values {
		body := `{"user_id":"` + v + `"}`
		if r := h.check(body); r.status != 200 {
			t.Fatalf("%q: %d %s", v, r.status, r.raw)
		}
	}
	if r := h.check(`{"user_id":"\u0061|b"}`); r.status != 429 {
		t.Fatalf(`"\u0061|b" is "a|b" and should be exhausted: %d`, r.status)
	}
	for k := range h.snapshot() {
		if strings.Contains(k, "DROP") || strings.Contains(k, "a|b") {
			t.Fatalf("a raw value appears in key %q", k)
		}
	}
}

func TestRules_GetShowsTheRulesAndPutNeedsTheAdminToken(t *testing.T) {
	t.Parallel()
	h := newHarness(t, defaultRules)
	g := h.do("GET", "/v1/rules", "", "")
	if g.status != 200 || len(g.body["rules"].([]any)) != 2 || g.body["version"] == "" {
		t.Fatalf("GET: %d %s", g.status, g.raw)
	}
	newRules := `{"rules":[{"name":"only","dimensions":["user_id"],"limit":1,"window":"1m","algorithm":"fixed_window"}]}`
	cases := []struct {
		name, auth, body string
		status           int
		code             string
	}{
		{"no token", "", newRules, 401, "unauthorized"},
		{"wrong token", "Bearer nope", newRules, 403, "forbidden"},
		{"not json", "Bearer " + adminToken, `rules: []`, 400, "invalid_rules"},
		{"unknown field", "Bearer " + adminToken, `{"rules":[{"name":"x","dimensions":["a"],"limit":1,"window":"1m","algorithm":"fixed_window","extra":1}]}`, 400, "invalid_rules"},
		{"unknown algorithm", "Bearer " + adminToken, `{"rules":[{"name":"x","dimensions":["a"],"limit":1,"window":"1m","algorithm":"leaky"}]}`, 400, "invalid_rules"},
		{"bad window", "Bearer " + adminToken, `{"rules":[{"name":"x","dimensions":["a"],"limit":1,"window":"soon","algorithm":"fixed_window"}]}`, 400, "invalid_rules"},
		{"duplicate names", "Bearer " + adminToken, `{"rules":[{"name":"x","dimensions":["a"],"limit":1,"window":"1m","algorithm":"fixed_window"},{"name":"x","dimensions":["b"],"limit":1,"window":"1m","algorithm":"fixed_window"}]}`, 400, "invalid_rules"},
	}
	for _, tc := range cases {
		r := h.do("PUT", "/v1/rules", "application/json", tc.body, "Authorization", tc.auth)
		if r.status != tc.status || r.errorCode() != tc.code {
			t.Errorf("%s: %d %q, want %d %q (%s)", tc.name, r.status, r.errorCode(), tc.status, tc.code, r.raw)
		}
	}
	if again := h.do("GET", "/v1/rules", "", ""); again.body["version"] != g.body["version"] {
		t.Fatalf("a rejected PUT changed the rules: %s", again.raw)
	}
	p := h.do("PUT", "/v1/rules", "application/json", newRules, "Authorization", "Bearer "+adminToken)
	if p.status != 200 || p.body["version"] == g.body["version"] {
		t.Fatalf("PUT: %d %s", p.status, p.raw)
	}
	if r := h.check(`{"user_id":"u"}`); r.status != 200 || r.entry(t, "only")["limit"].(float64) != 1 {
		t.Fatalf("new rules not in force: %s", r.raw)
	}
}
