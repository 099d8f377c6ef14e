package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"google.golang.org/grpc"

	"github.com/quota-platform/quota/api"
	"github.com/quota-platform/quota/api/rlsgrpc"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/envoyconf"
)

// loadEnvoyConfig reads QUOTA_ENVOY_CONFIG ("" : no domains, every
// descriptor OK).
func loadEnvoyConfig(s config.Settings) (*envoyconf.Config, error) {
	if s.EnvoyConfig == "" {
		return envoyconf.Empty(), nil
	}
	c, err := envoyconf.Load(s.EnvoyConfig)
	if err != nil {
		return nil, fmt.Errorf("QUOTA_ENVOY_CONFIG: %w", err)
	}
	return c, nil
}

// grpcWorkers is how many calls run on pooled workers at once (more start
// goroutines of their own): about the concurrency of a loaded quotad.
const grpcWorkers = 256

// grpcServer is Envoy's rate limit service as drain sees it: notReady turns
// its health to NOT_SERVING (with /readyz), stop drains it with the HTTP
// server.
type grpcServer struct {
	notReady func()
	stopper  stopper
}

// startGRPC serves Envoy's rate limit service on QUOTA_GRPC_LISTEN (nil
// with "off"). It keeps serving until drain stops it, so that during the
// drain wait it answers like the HTTP server does.
func startGRPC(s config.Settings, srv *api.Server, conf *rlsgrpc.EnvoyConfig, log *slog.Logger) (*grpcServer, error) {
	if s.GRPCListen == "off" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", s.GRPCListen)
	if err != nil {
		return nil, fmt.Errorf("QUOTA_GRPC_LISTEN %s: %w", s.GRPCListen, err)
	}
	// Handlers run on long-lived workers, whose stacks are already grown,
	// instead of a new goroutine per call that grows its stack each time.
	// Its checks share the HTTP server's decision path (metrics,
	// analytics, fail mode).
	gs, health := rlsgrpc.NewServer(srv.Core(), conf, grpc.NumStreamWorkers(grpcWorkers))
	go func() {
		if err := gs.Serve(ln); err != nil {
			log.Error("grpc server stopped", "err", err)
		}
	}()
	log.Info("quotad grpc listening", "addr", ln.Addr().String(), "envoy_domains", conf.Load().Domains())
	return &grpcServer{
		notReady: health.Shutdown,
		stopper: stopper{name: "grpc", stop: func(ctx context.Context) error {
			stopped := make(chan struct{})
			go func() { gs.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
				return nil
			case <-ctx.Done():
				gs.Stop()
				return ctx.Err()
			}
		}},
	}, nil
}

// reloadEnvoyOnHangup re-reads QUOTA_ENVOY_CONFIG on SIGHUP (with the rules
// file, reloadOnHangup), keeping the configuration in force when the new
// one is invalid.
func reloadEnvoyOnHangup(ctx context.Context, s config.Settings, conf *rlsgrpc.EnvoyConfig, changed func(), log *slog.Logger) {
	if s.EnvoyConfig == "" {
		return
	}
	onHangup(ctx, func() {
		c, err := loadEnvoyConfig(s)
		if err != nil {
			log.Error("envoy config reload failed; keeping the configuration in force", "err", err, "domains", conf.Load().Domains())
			return
		}
		conf.Store(c)
		changed() // limits may have changed: the cached denials go
		log.Info("envoy config reloaded", "domains", c.Domains())
	})
}
