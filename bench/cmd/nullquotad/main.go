// Command nullquotad answers quotad's two check entry points at once,
// with no Redis and no rules: ShouldRateLimit over gRPC (OK for every
// descriptor) and POST /v1/check over HTTP (200, allowed). `make
// bench-grpc-null` runs bench/grpc.sh against it, which gives the floor of
// `make bench-grpc` on a machine: what the load generator, the kernel,
// grpc-go's server and net/http cost by themselves on the cores they
// share, so that what quotad adds can be told from what it cannot remove.
// It listens where quotad would (QUOTA_LISTEN, QUOTA_GRPC_LISTEN) with
// quotad's gRPC flow-control windows and stream workers; it decodes
// requests with grpc-go's protobuf codec, not quotad's own. It keeps
// quotad's Go heap floor (QUOTA_GC_HEAP_FLOOR_MB, 256 MiB as quotad's
// default: internal/gcfloor), or its floor would count collections that
// quotad does not make.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/quota-platform/quota/internal/gcfloor"
)

type okService struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

// ShouldRateLimit answers OK, one status per descriptor, as quotad does
// for descriptors under their limits.
func (okService) ShouldRateLimit(_ context.Context, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	st := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(r.GetDescriptors()))
	for i := range st {
		st[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: st}, nil
}

var allowed = []byte(`{"allowed":true}` + "\n")

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "nullquotad:", err)
		os.Exit(1)
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run() error {
	floorMB, err := strconv.ParseUint(env("QUOTA_GC_HEAP_FLOOR_MB", "256"), 10, 32)
	if err != nil {
		return fmt.Errorf("QUOTA_GC_HEAP_FLOOR_MB: %w", err)
	}
	defer gcfloor.Start(floorMB << 20).Stop()
	gl, err := net.Listen("tcp", env("QUOTA_GRPC_LISTEN", "127.0.0.1:8081"))
	if err != nil {
		return err
	}
	hl, err := net.Listen("tcp", env("QUOTA_LISTEN", "127.0.0.1:8080"))
	if err != nil {
		return err
	}
	// quotad's own (rlsgrpc.grpcTransport in api/rlsgrpc, cmd/quotad's grpcWorkers).
	gs := grpc.NewServer(grpc.StaticStreamWindowSize(64<<10), grpc.StaticConnWindowSize(1<<20), grpc.NumStreamWorkers(256))
	rlsv3.RegisterRateLimitServiceServer(gs, okService{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("POST /v1/check", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(allowed)
	})
	hs := &http.Server{Handler: mux}
	errs := make(chan error, 2)
	go func() { errs <- gs.Serve(gl) }()
	go func() { errs <- hs.Serve(hl) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case err := <-errs:
		return err
	case <-sig:
		gs.Stop()
		return hs.Close()
	}
}
