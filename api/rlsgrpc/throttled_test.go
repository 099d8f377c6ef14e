package rlsgrpc_test

import (
	"context"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/quota-platform/quota/analytics"
)

// Denials of Envoy's rate limit service count in who is throttled too: the
// limit's full key is the rule, the descriptor's entries the identity; the
// allowed call is not counted.
func TestThrottled_EnvoyDescriptorsDeniedAreCounted(t *testing.T) {
	t.Parallel()
	h := newRLS(t, func(c *rlsConfig) { c.analytics = true })
	client, an := h.client, h.an
	ctx := context.Background()
	for i, hits := range []uint32{10000, 1, 1, 1} { // the first takes the hour's 10,000
		r, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "platform", HitsAddend: hits,
			Descriptors: []*rlcommon.RateLimitDescriptor{desc("app_id", "a1", "ip", "203.0.113.7")}})
		if err != nil {
			t.Fatal(err)
		}
		if want := i > 0; (r.OverallCode == over) != want {
			t.Fatalf("call %d: %s", i, r.OverallCode)
		}
	}
	got, err := an.Throttled.Top(ctx, "a1", analytics.DayOf(start), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Top) != 1 || got[0].Top[0].Denied != 3 ||
		got[0].Top[0].Dimensions["app_id"] != "a1" || got[0].Top[0].Dimensions["ip"] != "203.0.113.7" {
		t.Fatalf("who is throttled: %+v, want 3 denials of app_id=a1 ip=203.0.113.7", got)
	}
	t.Logf("the rule of an Envoy limit: %q", got[0].Rule)
}
