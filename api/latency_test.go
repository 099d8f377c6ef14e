package api_test

import (
	"net/http"
	"testing"
)

// Each check route is timed once per request in quota_check_duration_seconds
// under its own route, error answers included; a request no route matched
// is not a check. A route whose observation went missing fails here.
func TestCheckRoutes_TimedUnderTheirRoute(t *testing.T) {
	t.Parallel()
	h := newHarness(t, defaultRules)
	for _, r := range []struct {
		reply reply
		want  int
	}{
		{h.check(call), http.StatusOK},
		{h.do("POST", "/v1/check", "application/json", "{"), http.StatusBadRequest},
		{h.do("POST", "/v1/check", "text/plain", call), http.StatusUnsupportedMediaType},
		{h.do("POST", "/v1/check/batch", "application/json", `{"checks":[`+call+`]}`), http.StatusOK},
		{h.auth("GET", authHeaders...), http.StatusOK},
		{h.auth("POST"), http.StatusBadRequest},
		{h.do("GET", "/v1/check", "", ""), http.StatusMethodNotAllowed},
	} {
		if r.reply.status != r.want {
			t.Fatalf("status %d, want %d: %s", r.reply.status, r.want, r.reply.raw)
		}
	}
	m := h.metrics()
	for route, want := range map[string]float64{"/v1/check": 3, "/v1/check/batch": 1, "/v1/auth": 2} {
		if got := m[`quota_check_duration_seconds_count{route="`+route+`"}`]; got != want {
			t.Errorf("%s: %v latency observations, want %v", route, got, want)
		}
	}
	// The error answers are counted with their own status, as before.
	for key, want := range map[string]float64{
		`quota_http_requests_total{code="400",route="/v1/check"}`: 1,
		`quota_http_requests_total{code="415",route="/v1/check"}`: 1,
		`quota_http_requests_total{code="405",route="/v1/check"}`: 1,
		`quota_http_requests_total{code="400",route="/v1/auth"}`:  1,
	} {
		if got := m[key]; got != want {
			t.Errorf("%s = %v, want %v", key, got, want)
		}
	}
}
