package api

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/envoyconf"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/metrics"
)

// allowAll decides every check allowed with room left, without a store:
// what is measured is the Envoy layer's own work (and, over gRPC, the
// transport's), not Redis's.
type allowAll struct{}

func (allowAll) Check(_ context.Context, req *limiter.Request) (limiter.Decision, error) {
	d := limiter.Decision{Allowed: true, Entries: allowAllEntries[:len(req.Counters)]}
	return d, nil
}

var allowAllEntries = []limiter.Entry{
	{Rule: "platform.app_id.ip", Allowed: true, Limit: 10000, Remaining: 9000, ResetAfter: 30 * time.Minute},
	{Rule: "platform.app_id.user_id.interface_id", Allowed: true, Limit: 1000, Remaining: 900, ResetAfter: 30 * time.Minute},
}

// platformRequests are ShouldRateLimit requests with the platform's two
// descriptors (deploy/envoy/ratelimit.yaml), for n different keys.
func platformRequests(n int) []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, n)
	for i := range reqs {
		app := "app-" + strconv.Itoa(i%100)
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "platform", Descriptors: []*rlcommon.RateLimitDescriptor{
			{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "app_id", Value: app}, {Key: "ip", Value: "10.0.0." + strconv.Itoa(i%250)}}},
			{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "app_id", Value: app},
				{Key: "user_id", Value: "user-" + strconv.Itoa(i)}, {Key: "interface_id", Value: "iface-3"}}},
		}}
	}
	return reqs
}

func newBenchRLS(b *testing.B) *rateLimitService {
	b.Helper()
	conf, err := envoyconf.Load("../deploy/envoy/ratelimit.yaml")
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	s := New(Deps{Settings: config.Defaults(), Checks: allowAll{}, Metrics: metrics.New(reg), Gatherer: reg})
	rls := &rateLimitService{s: s, conf: NewEnvoyConfig(conf)}
	rls.latency = s.deps.Metrics.CheckLatency.WithLabelValues(rateLimitMethod)
	return rls
}

// BenchmarkShouldRateLimit is the Envoy layer's work for one call with the
// platform's two descriptors (checks, lookup, the limiter request, the
// answer), without transport or store: run with -benchmem, its allocs/op
// are deterministic.
func BenchmarkShouldRateLimit(b *testing.B) {
	rls := newBenchRLS(b)
	reqs := platformRequests(1024)
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

// BenchmarkShouldRateLimitGRPC is one call over loopback gRPC, quotad's
// server against grpc-go's client, the store left out as above. Its
// allocs/op count both ends: the client's do not change with the server.
func BenchmarkShouldRateLimitGRPC(b *testing.B) {
	rls := newBenchRLS(b)
	gs, _ := rls.s.NewGRPC(rls.conf)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	reqs := platformRequests(1024)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		resp, err := client.ShouldRateLimit(ctx, reqs[i%len(reqs)])
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			b.Fatalf("%v %v", resp, err)
		}
	}
}
