package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/quota-platform/quota/api"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/tick"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tracing"
)

// healthcheck GETs /healthz of the quotad configured by QUOTA_LISTEN (or
// of the URL given) and fails unless it answers 200: the container image's
// HEALTHCHECK, whose minimal base has no shell or curl.
func healthcheck(args []string) error {
	url := ""
	switch len(args) {
	case 0:
		listen := os.Getenv("QUOTA_LISTEN")
		if listen == "" {
			listen = config.Defaults().Listen
		}
		host, port, err := net.SplitHostPort(listen)
		if err != nil {
			return fmt.Errorf("healthcheck: QUOTA_LISTEN %q: want host:port", listen)
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			host = "127.0.0.1" // listening on every address: ask the local one
		}
		url = "http://" + net.JoinHostPort(host, port) + "/healthz"
	case 1:
		url = args[0]
	default:
		return fmt.Errorf("healthcheck: want at most one URL, got %d arguments", len(args))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %s", url, resp.Status)
	}
	return nil
}

// startTracing returns the tracer provider of the configured OTLP endpoint
// (nil with tracing off: nothing is wrapped) and the function that sends
// the last spans at shutdown.
func startTracing(s config.Settings, version string, log *slog.Logger) (trace.TracerProvider, func(), error) {
	if s.OTelEndpoint == "" {
		return nil, func() {}, nil
	}
	tp, err := tracing.NewProvider(context.Background(), s.OTelEndpoint, version)
	if err != nil {
		return nil, nil, err
	}
	log.Info("tracing checks", "otlp_endpoint", s.OTelEndpoint)
	return tp, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn("tracing: last spans not sent", "err", err)
		}
	}, nil
}

// probeDependencies runs the readiness checks every 10 s until ctx ends and
// exports each result as quota_dependency_up, so that an outage of one
// MySQL shard or of Redis shows (and alerts) even between checks that
// reach it. The first probe runs before it returns (before quotad
// serves): every dependency's series exists, and is true, from the first
// scrape; the others run in the background. The dependencies are probed
// at once, so a start with some down waits one probe's timeout (2 s), not
// one per dependency.
func probeDependencies(ctx context.Context, checks []api.ReadinessCheck, up *prometheus.GaugeVec) {
	probe := func() {
		var wg sync.WaitGroup
		for _, c := range checks {
			wg.Go(func() {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				err := c.Check(pctx)
				cancel()
				v := 1.0
				if err != nil {
					v = 0
				}
				up.WithLabelValues(c.Name).Set(v)
			})
		}
		wg.Wait()
	}
	probe()
	go tick.Every(ctx, 10*time.Second, probe)
}

// ruleNames are the names of set's rules (their quota_checks_total series
// exist from the start: metrics.ZeroChecks).
func ruleNames(set *rules.Set) []string {
	names := make([]string, 0, len(set.Rules))
	for _, r := range set.Rules {
		names = append(names, r.Name)
	}
	return names
}
