package rlsgrpc_test

import (
	"context"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quota-platform/quota/api/decide"
	"github.com/quota-platform/quota/api/rlsgrpc"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/envoyconf"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/metrics"
)

// BenchmarkShouldRateLimit is one Envoy call with the platform's two
// descriptors through the handler (checks, lookup, the limiter request,
// one Redis round trip, the answer), without the transport: run with
// -benchmem to see the call's allocations beside /v1/check's.
// bench/grpcbench's BenchmarkCall adds the transport.
func BenchmarkShouldRateLimit(b *testing.B) {
	rdb, prefix := testenv.Redis(b)
	conf, err := envoyconf.Load("../../deploy/envoy/ratelimit.yaml")
	if err != nil {
		b.Fatal(err)
	}
	lim := newLimiter(b, rdb, prefix, clock.Real{})
	reg := prometheus.NewRegistry()
	core := decide.New(decide.Deps{Settings: config.Defaults(), Limiter: lim, Metrics: metrics.New(reg)})
	rls := rlsgrpc.New(core, rlsgrpc.NewEnvoyConfig(conf))
	reqs := rlsgrpc.PlatformRequests(1024)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		resp, err := rls.ShouldRateLimit(ctx, reqs[i%len(reqs)])
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			b.Fatalf("%v %v", resp, err)
		}
	}
}
