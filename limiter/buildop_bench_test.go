package limiter

import (
	"fmt"
	"testing"
	"time"

	"github.com/quota-platform/quota/rules"
)

// BenchmarkBuildOp is what deciding a check's cells costs quotad's CPU
// (no Redis): the two platform rules alone, and with 10,000 apps on three
// plans and 1,000 overrides (make bench-plans runs it beside the end-to-end
// comparison).
func BenchmarkBuildOp(b *testing.B) {
	set, err := rules.ParseYAML([]byte(`
rules:
  - {name: app_ip_hourly, dimensions: [app_id, ip], limit: 10000, window: 1h, algorithm: fixed_window}
  - {name: app_user_iface_hourly, dimensions: [app_id, user_id, interface_id], limit: 1000, window: 1h, algorithm: fixed_window}
plans:
  pro: {app_ip_hourly: 50000, app_user_iface_hourly: 5000}
  partner: {app_ip_hourly: 200000, app_user_iface_hourly: 20000}
  enterprise: {app_ip_hourly: 1000000, app_user_iface_hourly: 100000}
`))
	if err != nil {
		b.Fatal(err)
	}
	a := &rules.Assignments{Plans: map[string]string{}, Overrides: map[string]map[string]rules.LimitsSpec{}}
	plans := []string{"", "pro", "partner", "enterprise"}
	for i := range 10_000 {
		app := fmt.Sprint("app-", i)
		if p := plans[i%4]; p != "" {
			a.Plans[app] = p
		}
		if i%10 == 0 {
			a.Overrides[app] = map[string]rules.LimitsSpec{"app_ip_hourly": {Limit: int64(20000 + i)}}
		}
	}
	reqs := make([]*Request, 1000)
	for i := range reqs {
		reqs[i] = &Request{Cost: 1, Dims: []Dim{{"app_id", fmt.Sprint("app-", i*7%10_000)}, {"ip", "203.0.113.7"}, {"user_id", fmt.Sprint("u", i)}, {"interface_id", "users.get"}}}
	}
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		a    *rules.Assignments
	}{{"rules-only", nil}, {"plans-10000-apps", a}} {
		cs, err := compile(set, c.a)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				op, owners := buildOp(cs, reqs[i%len(reqs)], now, time.UTC, false)
				_ = decision(op, owners)
			}
		})
		// What Denied builds to look a check up in the denial cache.
		b.Run(c.name+"/cache-only", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				op, owners := buildOp(cs, reqs[i%len(reqs)], now, time.UTC, true)
				_ = decision(op, owners)
			}
		})
	}
}
