package limiter_test

import (
	"context"
	"testing"

	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/rules"
)

// BenchmarkDenied is a check of the platform's two rules answered from
// the denial cache (Limiter.Denied), both limits exhausted, as the
// flood-shared workload of make bench-peers sends them.
func BenchmarkDenied(b *testing.B) {
	set, err := rules.ParseYAML([]byte(`
rules:
  - {name: app_ip_hourly, dimensions: [app_id, ip], limit: 1, window: 1h, algorithm: fixed_window}
  - {name: app_user_iface_hourly, dimensions: [app_id, user_id, interface_id], limit: 1, window: 1h, algorithm: fixed_window}
`))
	if err != nil {
		b.Fatal(err)
	}
	rig := newDenialRig(b, set.Rules, 1000)
	req := &limiter.Request{Cost: 1, Dims: dims("app_id", "flood-shared", "ip", "10.0.0.0", "user_id", "flood-3", "interface_id", "iface-0")}
	ctx := context.Background()
	for range 3 {
		if _, err := rig.cached.Check(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	if _, ok := rig.cached.Denied(req); !ok {
		b.Fatal("not cached")
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok := rig.cached.Denied(req); !ok {
				b.Fatal("not cached")
			}
		}
	})
}
