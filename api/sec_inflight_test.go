package api_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quota-platform/quota/config"
)

// With every in-flight slot taken, checks get a fast 503 but /healthz and
// /metrics still answer: a liveness probe must not fail because of load,
// and the metrics are how the overload is seen.
func TestSec_HealthAndMetricsAnswerWhenOverloaded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, oneRule, settings(func(s *config.Settings) { s.MaxInFlight = 1 }))
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Hold the only slot with a body that never finishes.
	_, _ = io.WriteString(conn, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	deadline := time.Now().Add(5 * time.Second)
	for h.check(`{"user_id":"u"}`).status != http.StatusServiceUnavailable {
		if time.Now().After(deadline) {
			t.Fatal("the slot was never taken")
		}
		time.Sleep(10 * time.Millisecond)
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
