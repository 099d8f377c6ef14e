//go:build !race

package decide

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quota-platform/quota/analytics/throttled"
	"github.com/quota-platform/quota/analytics/usage"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/metrics"
	"github.com/quota-platform/quota/rules"
)

// Counting a denied check of the platform rules in the metrics and in who
// is throttled allocates nothing once its identity is known.
func TestDecided_DenialOfAKnownIdentityAllocatesNothing(t *testing.T) {
	set, err := rules.ParseYAML([]byte(`
rules:
  - {name: app_ip_hourly, dimensions: [app_id, ip], limit: 10000, window: 1h, algorithm: fixed_window}
  - {name: app_user_iface_hourly, dimensions: [app_id, user_id, interface_id], limit: 1000, window: 1h, algorithm: fixed_window}
`))
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	lim, err := limiter.New(nil, clk, set)
	if err != nil {
		t.Fatal(err)
	}
	c := New(Deps{Settings: config.Defaults(), Limiter: lim, Metrics: metrics.New(prometheus.NewRegistry()),
		Throttled: throttled.New(clk, usage.Days{}, nil, throttled.Options{}, nil)})
	req := &limiter.Request{Cost: 1, Dims: []limiter.Dim{{Name: "app_id", Value: "a1"}, {Name: "ip", Value: "10.0.0.1"}, {Name: "user_id", Value: "u42"}, {Name: "interface_id", Value: "users.get"}}}
	d := &limiter.Decision{Entries: []limiter.Entry{{Rule: "app_ip_hourly", Allowed: true, Remaining: 5}, {Rule: "app_user_iface_hourly"}}}
	c.Decided(req, d)
	if n := testing.AllocsPerRun(100, func() { c.Decided(req, d) }); n != 0 {
		t.Fatalf("%v allocations a denial, want 0", n)
	}
}
