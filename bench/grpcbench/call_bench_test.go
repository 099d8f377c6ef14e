package main

import (
	"context"
	"net"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/quota-platform/quota/api/decide"
	"github.com/quota-platform/quota/api/rlsgrpc"
	"github.com/quota-platform/quota/bench/loadgen"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/envoyconf"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/metrics"
)

// allowAll decides every check allowed, without a store.
type allowAll struct{}

func (allowAll) Check(_ context.Context, req *limiter.Request) (limiter.Decision, error) {
	d := limiter.Decision{Allowed: true}
	for _, c := range req.Counters {
		d.Entries = append(d.Entries, limiter.Entry{Rule: c.Name, Allowed: true, Limit: c.Limit, Remaining: c.Limit - 1, ResetAfter: time.Minute})
	}
	return d, nil
}

// BenchmarkCall is one ShouldRateLimit with the platform's two descriptors,
// from each client to quotad's own gRPC server in this process, its store
// left out (every check allowed): what a call costs both ends beyond the
// store, one call at a time. Under callgrind with a fixed -benchtime its
// instruction count per call hardly depends on what else the machine runs.
func BenchmarkCall(b *testing.B) {
	conf, err := envoyconf.Load("../../deploy/envoy/ratelimit.yaml")
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	core := decide.New(decide.Deps{Settings: config.Defaults(), Checks: allowAll{}, Metrics: metrics.New(reg)})
	gs, _ := rlsgrpc.NewServer(core, rlsgrpc.NewEnvoyConfig(conf), grpc.NumStreamWorkers(256)) // as quotad
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()
	for _, client := range []string{clientRaw, clientGRPCGo} {
		b.Run(client, func(b *testing.B) {
			o := options{grpcAddr: ln.Addr().String(), domain: "platform", grpcClient: client, conns: 1, grpcConns: 1}
			g, err := newGRPCTarget(o)
			if err != nil {
				b.Fatal(err)
			}
			defer g.close()
			call := g.caller(context.Background(), 0)
			src := loadgen.NewKeySource(loadgen.DefaultConfig().Keys, 1, 0)
			var v platformValues
			b.ReportAllocs()
			for b.Loop() {
				v.set(src.Next())
				a, err := call(&v)
				if err != nil || a.overall != int32(rlsv3.RateLimitResponse_OK) {
					b.Fatalf("%+v %v", a, err)
				}
			}
		})
	}
}
