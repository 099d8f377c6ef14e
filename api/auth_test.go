package api_test

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// authHeaders are the default QUOTA_AUTH_HEADERS of the call `call`.
var authHeaders = []string{"X-App-Id", "a1", "X-Real-IP", "203.0.113.7", "X-User-Id", "u42", "X-Interface-Id", "users.get"}

func (h *harness) auth(method string, header ...string) reply {
	h.t.Helper()
	return h.do(method, "/v1/auth", "", "", header...)
}

// metrics reads GET /metrics into series -> value.
func (h *harness) metrics() map[string]float64 {
	h.t.Helper()
	resp, err := http.Get(h.srv.URL + "/metrics")
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return testenv.ParseMetrics(string(b))
}

func TestAuth_LimitAllowsExactlyNThenAnswersTheDenyStatus(t *testing.T) {
	t.Parallel()
	for _, deny := range []int{0, 403} {
		t.Run(strconv.Itoa(deny), func(t *testing.T) {
			t.Parallel()
			want := http.StatusTooManyRequests
			h := newHarness(t, oneRule, settings(func(s *config.Settings) {
				if deny != 0 {
					s.AuthDenyStatus, want = deny, deny
				}
			}))
			for i := 1; i <= 2; i++ {
				r := h.auth("GET", "X-User-Id", "u")
				if r.status != http.StatusOK || r.header.Get("RateLimit-Limit") != "2" || r.header.Get("RateLimit-Remaining") != strconv.Itoa(2-i) ||
					r.header.Get("RateLimit-Reset") != "3600" || r.header.Get("Retry-After") != "" {
					t.Fatalf("call %d: %d %v", i, r.status, r.header)
				}
			}
			r := h.auth("GET", "X-User-Id", "u")
			if r.status != want || r.header.Get("Retry-After") != "3600" || r.header.Get("RateLimit-Remaining") != "0" || r.allowed() {
				t.Fatalf("call 3: %d %v %s, want %d with Retry-After", r.status, r.header, r.raw, want)
			}
		})
	}
}

func TestAuth_SharesCountersWithCheck(t *testing.T) {
	t.Parallel()
	h := newHarness(t, defaultRules)
	// 1,000 calls of one identity, alternating entry points: exactly the limit.
	for i := 0; i < 1000; i++ {
		var r reply
		if i%2 == 0 {
			r = h.check(call)
		} else {
			r = h.auth("GET", authHeaders...)
		}
		if r.status != http.StatusOK {
			t.Fatalf("call %d: %d %s", i+1, r.status, r.raw)
		}
	}
	if r := h.auth("GET", authHeaders...); r.status != http.StatusTooManyRequests {
		t.Fatalf("auth call 1001: %d", r.status)
	}
	if r := h.check(call); r.status != http.StatusTooManyRequests || r.remaining(t, "app_ip_hourly") != 9000 {
		t.Fatalf("check call 1002: %d %s", r.status, r.raw)
	}
	// The same metrics as /v1/check: every decision counted per rule.
	m := h.metrics()
	if got := m[`quota_checks_total{decision="allowed",rule="app_user_iface_hourly"}`]; got != 1000 {
		t.Errorf("allowed decisions %v, want 1000", got)
	}
	if got := m[`quota_checks_total{decision="denied",rule="app_user_iface_hourly"}`]; got != 2 {
		t.Errorf("denied decisions %v, want 2", got)
	}
	if got := m[`quota_check_duration_seconds_count{route="/v1/auth"}`]; got != 501 {
		t.Errorf("/v1/auth latency observations %v, want 501", got)
	}
}

func TestAuth_AnyMethodIsACheck(t *testing.T) {
	t.Parallel()
	h := newHarness(t, defaultRules)
	methods := []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
	for i, m := range methods {
		r := h.auth(m, "X-App-Id", "a1", "X-Real-IP", "192.0.2.1")
		if r.status != http.StatusOK || r.header.Get("RateLimit-Remaining") != strconv.Itoa(10000-1-i) {
			t.Fatalf("%s: %d %v", m, r.status, r.header)
		}
	}
}

func TestAuth_AbsentHeadersAreAbsentDimensions(t *testing.T) {
	t.Parallel()
	h := newHarness(t, defaultRules)
	// No user or interface: only app_ip_hourly applies; an empty header is absent.
	r := h.auth("GET", "X-App-Id", "a1", "X-Real-IP", "192.0.2.9", "X-User-Id", "")
	if r.status != http.StatusOK || r.header.Get("RateLimit-Limit") != "10000" {
		t.Fatalf("%d %v %s", r.status, r.header, r.raw)
	}
	if list := r.body["rules"].([]any); len(list) != 1 {
		t.Fatalf("want only app_ip_hourly: %s", r.raw)
	}
	// A dimension no rule names: allowed, no headers, as /v1/check.
	r = h.auth("GET", "X-User-Id", "lonely")
	if r.status != http.StatusOK || r.header.Get("RateLimit-Limit") != "" {
		t.Fatalf("no rule applies: %d %v", r.status, r.header)
	}
}

func TestAuth_CostHeaderTakesThatMuchQuota(t *testing.T) {
	t.Parallel()
	h := newHarness(t, oneRule)
	if r := h.auth("GET", "X-User-Id", "u", "X-Quota-Cost", "2"); r.status != 200 || r.header.Get("RateLimit-Remaining") != "0" {
		t.Fatalf("cost 2 of 2: %d %v", r.status, r.header)
	}
	if r := h.auth("GET", "X-User-Id", "u"); r.status != 429 {
		t.Fatalf("after the whole quota: %d", r.status)
	}
}

func TestAuth_InvalidHeadersAre400AndCountNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, defaultRules)
	h.auth("GET", authHeaders...) // one counted call, so there is something to keep
	before := h.snapshot()
	long := strings.Repeat("x", 257)
	cases := []struct {
		name   string
		header []string
		code   string
	}{
		{"no usable header", []string{"X-Other", "v"}, "no_dimensions"},
		{"only empty headers", []string{"X-App-Id", "", "X-User-Id", ""}, "no_dimensions"},
		{"invalid UTF-8", []string{"X-App-Id", "a1", "X-User-Id", "u\xff"}, "invalid_header"},
		{"over 256 bytes", []string{"X-App-Id", "a1", "X-User-Id", long}, "invalid_header"},
		{"cost zero", []string{"X-App-Id", "a1", "X-Quota-Cost", "0"}, "invalid_cost"},
		{"cost not an integer", []string{"X-App-Id", "a1", "X-Quota-Cost", "1.5"}, "invalid_cost"},
		{"cost signed", []string{"X-App-Id", "a1", "X-Quota-Cost", "+1"}, "invalid_cost"},
		{"cost too large", []string{"X-App-Id", "a1", "X-Quota-Cost", "1000001"}, "invalid_cost"},
	}
	for _, tc := range cases {
		hdr := append(append([]string{}, authHeaders...), tc.header...)
		if tc.code == "no_dimensions" {
			hdr = tc.header
		}
		r := h.auth("GET", hdr...)
		if r.status != http.StatusBadRequest || r.errorCode() != tc.code {
			t.Errorf("%s: %d %s, want 400 %s", tc.name, r.status, r.raw, tc.code)
		}
	}
	// A header given twice is ambiguous: which identity would be counted?
	req, _ := http.NewRequest("GET", h.srv.URL+"/v1/auth", nil)
	req.Header.Add("X-App-Id", "a1")
	req.Header.Add("X-App-Id", "a2")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("header given twice: %d, want 400", resp.StatusCode)
	}
	after := h.snapshot()
	if len(after) != len(before) {
		t.Fatalf("bad requests changed the counters: %v -> %v", before, after)
	}
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("bad requests changed %s: %s -> %s", k, v, after[k])
		}
	}
}

func TestAuth_HeaderMappingComesFromSettings(t *testing.T) {
	t.Parallel()
	h := newHarness(t, oneRule, settings(func(s *config.Settings) {
		s.AuthHeaders = []config.AuthHeader{{Dimension: "user_id", Header: "X-Consumer"}}
	}))
	if r := h.auth("GET", "X-User-Id", "u"); r.status != http.StatusBadRequest {
		t.Fatalf("the default header is not mapped any more: %d", r.status)
	}
	if r := h.auth("GET", "X-Consumer", "u"); r.status != 200 || r.header.Get("RateLimit-Remaining") != "1" {
		t.Fatalf("mapped header: %d %v", r.status, r.header)
	}
}

func TestAuth_CheckTokenAsXQuotaTokenOrBearer(t *testing.T) {
	t.Parallel()
	const tok = "check-token-0123456789"
	h := newHarness(t, oneRule, settings(func(s *config.Settings) { s.CheckToken = tok }))
	for _, tc := range []struct {
		header []string
		status int
	}{
		{nil, 401},
		{[]string{"X-Quota-Token", "wrong"}, 401},
		{[]string{"Authorization", "Bearer wrong"}, 401},
		// The client's own Authorization does not stand in for a wrong X-Quota-Token.
		{[]string{"X-Quota-Token", "wrong", "Authorization", "Bearer " + tok}, 401},
		{[]string{"X-Quota-Token", tok, "Authorization", "Bearer the-clients-own"}, 200},
		{[]string{"Authorization", "Bearer " + tok}, 200},
	} {
		r := h.auth("GET", append([]string{"X-User-Id", "u"}, tc.header...)...)
		if r.status != tc.status {
			t.Errorf("%v: %d, want %d", tc.header, r.status, tc.status)
		}
	}
	// Only the two authorized calls counted.
	if r := h.auth("GET", "X-User-Id", "u", "X-Quota-Token", tok); r.status != 429 {
		t.Fatalf("third authorized call: %d", r.status)
	}
}
