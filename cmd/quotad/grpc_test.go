package main_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

const envoyConfig = `domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: LIMIT}
`

// TestGRPC_SIGHUPReloadsEnvoyConfigAndKeepsOldOnInvalid runs quotad with
// the Envoy rate limit service and reloads its configuration on SIGHUP.
func TestGRPC_SIGHUPReloadsEnvoyConfigAndKeepsOldOnInvalid(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	conf := writeFile(t, dir, "envoy.yaml", strings.Replace(envoyConfig, "LIMIT", "1", 1))
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	s := startServer(t, writeFile(t, dir, "rules.yaml", validRules), "QUOTA_GRPC_LISTEN="+addr, "QUOTA_ENVOY_CONFIG="+conf)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	waitServing(t, conn)
	rls := rlsv3.NewRateLimitServiceClient(conn)
	// remaining asks twice for value v and returns both answers' codes.
	codes := func(v string) string {
		t.Helper()
		var out []string
		for range 2 {
			r, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{
				{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "k", Value: v}}}}})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r.OverallCode.String())
		}
		return strings.Join(out, ",")
	}
	if got := codes("a"); got != "OK,OVER_LIMIT" {
		t.Fatalf("limit 1: %s", got)
	}
	waitLog := func(line string, n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for strings.Count(s.logs.String(), line) < n {
			if time.Now().After(deadline) {
				t.Fatalf("no %q logged: %s", line, s.logs)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	writeFile(t, dir, "envoy.yaml", strings.NewReplacer("minute", "fortnight", "LIMIT", "1").Replace(envoyConfig))
	_ = s.cmd.Process.Signal(syscall.SIGHUP)
	waitLog("envoy config reload failed", 1)
	if !strings.Contains(s.logs.String(), "invalid rate limit unit 'fortnight'") {
		t.Fatalf("the reload error does not say why: %s", s.logs)
	}
	if got := codes("b"); got != "OK,OVER_LIMIT" {
		t.Fatalf("after an invalid file: %s (the old configuration should stay)", got)
	}

	writeFile(t, dir, "envoy.yaml", strings.Replace(envoyConfig, "LIMIT", "2", 1))
	_ = s.cmd.Process.Signal(syscall.SIGHUP)
	waitLog("envoy config reloaded", 1)
	if got := codes("c"); got != "OK,OK" {
		t.Fatalf("after a valid file with limit 2: %s", got)
	}

	// SIGTERM: quotad drains the gRPC server too and exits 0.
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v: %s", err, s.logs)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("quotad did not exit within 15 s of SIGTERM: %s", s.logs)
	}
}

func waitServing(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	hc := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: rlsv3.RateLimitService_ServiceDesc.ServiceName})
		if err == nil && r.Status == healthpb.HealthCheckResponse_SERVING {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("grpc health: %v %v", r, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
