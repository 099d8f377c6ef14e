package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// stopper is one server that drain stops: stop must stop accepting new
// work, finish what is in flight, and give up when ctx ends. A gRPC server
// joins as stopper{"grpc", func(ctx) error { return graceful(ctx, gs) }}.
type stopper struct {
	name string
	stop func(context.Context) error
}

// httpStopper stops hs with its ShutdownWithContext: no new connection,
// the requests in flight finished.
func httpStopper(hs *fasthttp.Server) stopper {
	return stopper{name: "http", stop: hs.ShutdownWithContext}
}

// drain takes the instance out of its load balancer, then stops the servers.
// notReady turns /readyz to 503; the balancer notices on its next probe, so
// drain waits until waited is closed (QUOTA_DRAIN, or a second signal) while
// every server still answers; then all servers stop together, each finishing
// its requests in flight, within grace.
func drain(log *slog.Logger, notReady func(), waited <-chan struct{}, grace time.Duration, servers ...stopper) error {
	notReady()
	log.Info("draining: /readyz answers 503; waiting for the load balancer to notice")
	<-waited
	log.Info("draining: stopping the servers", "grace", grace.String())
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	errc := make(chan error, len(servers))
	for _, s := range servers {
		go func() {
			if err := s.stop(ctx); err != nil {
				errc <- fmt.Errorf("shutdown %s: %w", s.name, err)
				return
			}
			errc <- nil
		}()
	}
	var errs []error
	for range servers {
		errs = append(errs, <-errc)
	}
	return errors.Join(errs...)
}

// drainWait is closed after d, or at once when a second SIGTERM or SIGINT
// arrives (an operator who does not want to wait).
func drainWait(d time.Duration) <-chan struct{} {
	done := make(chan struct{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		defer signal.Stop(sig)
		defer close(done)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-sig:
		}
	}()
	return done
}
