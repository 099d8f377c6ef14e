package api_test

import (
	"net/http"
	"testing"

	"github.com/quota-platform/quota/config"
)

// With every in-flight slot taken, checks get a fast 503 but /healthz and
// /metrics still answer: a liveness probe must not fail because of load,
// and the metrics are how the overload is seen.
func TestSec_HealthAndMetricsAnswerWhenOverloaded(t *testing.T) {
	t.Parallel()
	sh := newSlotHolder()
	h := newHarness(t, oneRule, settings(func(s *config.Settings) { s.MaxInFlight = 1 }), sh.option())
	sh.hold(t, h) // the only slot, held by work in progress
	if r := h.check(`{"user_id":"u"}`); r.status != http.StatusServiceUnavailable {
		t.Fatalf("a check with the slot taken: %d %s", r.status, r.raw)
	}
	for _, path := range []string{"/healthz", "/metrics"} {
		resp, err := http.Get(h.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s with the in-flight cap reached: %d", path, resp.StatusCode)
		}
	}
}
