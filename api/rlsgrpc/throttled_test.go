package rlsgrpc_test

import (
	"context"
	"net"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quota-platform/quota/analytics"
	"github.com/quota-platform/quota/api/decide"
	"github.com/quota-platform/quota/api/rlsgrpc"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/envoyconf"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/metrics"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers/hot"
)

// Denials of Envoy's rate limit service count in who is throttled too: the
// limit's full key is the rule, the descriptor's entries the identity; the
// allowed call is not counted.
func TestThrottled_EnvoyDescriptorsDeniedAreCounted(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	clk := clock.NewFake(start)
	set, _ := rules.NewSet(nil)
	lim, err := limiter.New(hot.NewStore(rdb, hot.Options{Prefix: prefix, Jitter: time.Second}), clk, set)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	an, err := analytics.New(analytics.Options{DBs: testenv.MySQLShards(t, 1), Redis: rdb, KeyPrefix: prefix, Clock: clk, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	conf, err := envoyconf.Load("../../envoyconf/testdata")
	if err != nil {
		t.Fatal(err)
	}
	core := decide.New(decide.Deps{Settings: config.Defaults(), Limiter: lim, Metrics: metrics.New(reg),
		Usage: an.Recorder, Throttled: an.Throttled})
	gs, _ := rlsgrpc.NewServer(core, rlsgrpc.NewEnvoyConfig(conf))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := rlsv3.NewRateLimitServiceClient(conn)
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
