package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/quota-platform/quota/analytics"
	"github.com/quota-platform/quota/analytics/throttled"
	"github.com/quota-platform/quota/api"
	"github.com/quota-platform/quota/api/rlsgrpc"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/coalesce"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/envoyconf"
	"github.com/quota-platform/quota/internal/version"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/metrics"
	"github.com/quota-platform/quota/nearquota"
	"github.com/quota-platform/quota/notify"
	"github.com/quota-platform/quota/redisconn"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/routing"
	"github.com/quota-platform/quota/tracing"
)

// The named steps of serve (main.go), in the order it takes them.

// startFiles is what serve reads before it connects to anything: the rules
// file, the rules kept in QUOTA_RULES_STATE, envoy's configuration.
type startFiles struct {
	set       *rules.Set
	state     *ruleState
	envoyConf *envoyconf.Config
}

func readStartFiles(s config.Settings) (startFiles, error) {
	set, err := rules.ReadFile(s.RulesPath)
	if err != nil {
		return startFiles{}, err
	}
	state, err := newRuleState(s.RulesState, s.RulesPath, set.Version)
	if err != nil {
		return startFiles{}, err
	}
	envoyConf, err := loadEnvoyConfig(s)
	if err != nil {
		return startFiles{}, err
	}
	return startFiles{set: set, state: state, envoyConf: envoyConf}, nil
}

// newCheckStore puts the circuit breaker in front of the store checks go
// to (traced when tracing is on). The breaker answers at once while Redis
// is down instead of letting every check wait out QUOTA_REDIS_TIMEOUT, and
// probes it every 100 ms with a PING outside the pool (redisconn.Probe).
func newCheckStore(s config.Settings, rdb redis.UniversalClient, routed tiers.Store, tp trace.TracerProvider) *routing.Breaker {
	if tp != nil {
		routed = tracing.Store(routed, tp)
	}
	store := routing.NewBreaker(routed, clock.Real{}, 3, 100*time.Millisecond).
		WithProbe(redisconn.Probe(s), s.RedisTimeout)
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		// A circuit per master: one dead master fails fast only the checks
		// of its slots, and its probe reloads the slot map so that they
		// follow the replica's promotion (redisconn.ClusterProbe).
		store.WithPartitions(routing.ClusterPartition(cc), redisconn.ClusterProbe(cc, s), s.RedisTimeout)
	}
	return store
}

// newLimiter makes the limiter over store, with the decision clock, the
// near-quota signals (series always, the webhook when set: notify) and the
// record of the identities nearest their quotas (nearquota), which run
// until ctx ends.
func newLimiter(ctx context.Context, s config.Settings, store tiers.Store, rdb redis.UniversalClient, set *rules.Set, reg prometheus.Registerer, log *slog.Logger) (*limiter.Limiter, *nearquota.Record, error) {
	clk, err := decisionClock(os.Getenv)
	if err != nil {
		return nil, nil, err
	}
	nearQuota := notify.New(notify.Options{URL: s.WebhookURL, Secret: s.WebhookSecret, Redis: rdb, Prefix: s.RedisKeyPrefix, Registerer: reg, Log: log})
	go nearQuota.Run(ctx)
	nearest := nearquota.New(nearquota.Options{Redis: rdb, Prefix: s.RedisKeyPrefix, Registerer: reg, Log: log})
	go nearest.Run(ctx)
	lim, err := limiter.New(store, clk, set, limiter.InLocation(s.Location),
		limiter.WithQuotaWatcher(nearQuota), limiter.WithIdentityQuotaWatcher(nearest))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", s.RulesPath, err)
	}
	return lim, nearest, nil
}

// newMetrics registers the Go, process and build series and quotad's own.
func newMetrics(reg *prometheus.Registry, build version.Info, rulesVersion string) *metrics.Metrics {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg)
	metrics.RegisterBuildInfo(reg, build.Version, build.Revision, build.GoVersion)
	m.SetRulesVersion(rulesVersion)
	return m
}

// newCheckPath is what single checks go through: cached denials first,
// then the coalescer (QUOTA_COALESCE > 0) or the limiter. stop stops the
// coalescer.
func newCheckPath(s config.Settings, lim *limiter.Limiter) (checks api.SingleChecker, stop func()) {
	checks, stop = lim, func() {}
	if s.Coalesce > 0 {
		// Cold checks hold a batch for their MySQL transactions: a sender
		// leaves such a batch to finish on its own once its hot checks
		// are answered, rather than keep the next hot checks queued behind
		// it. Without tiering nothing is slow and this costs nothing.
		co := coalesce.NewWithHandOff(lim, s.Coalesce, 256, coalesce.DefaultBackground*s.Coalesce)
		checks, stop = co, co.Close
	}
	return lim.DenialsFirst(checks), stop // cached denials skip the coalescer
}

// analyticsDeps are the API's analytics parts; nil with analytics off.
func analyticsDeps(an *analytics.Analytics) (api.UsageRecorder, *analytics.Stats, *throttled.Throttled) {
	if an == nil {
		return nil, nil, nil
	}
	return an.Recorder, an.Stats, an.Throttled
}

// startEnvoyService serves Envoy's rate limit service over gRPC
// (QUOTA_GRPC_LISTEN; nil when off) with conf, which SIGHUP reloads; changed
// is called after each reload.
func startEnvoyService(ctx context.Context, s config.Settings, srv *api.Server, conf *envoyconf.Config, changed func(), log *slog.Logger) (*grpcServer, error) {
	envoy := rlsgrpc.NewEnvoyConfig(conf)
	go reloadEnvoyOnHangup(ctx, s, envoy, changed, log)
	return startGRPC(s, srv, envoy, log)
}

// tracedHandler is srv, with a span per request when tracing is on.
func tracedHandler(srv *api.Server, tp trace.TracerProvider) http.Handler {
	if tp != nil {
		return tracing.Handler(srv, tp)
	}
	return srv
}

// startPprof serves net/http/pprof on QUOTA_PPROF_LISTEN, when set, until
// ctx ends.
func startPprof(ctx context.Context, s config.Settings, log *slog.Logger) {
	if s.PprofListen == "" {
		return
	}
	go func() {
		if err := servePprof(ctx, s.PprofListen, log); err != nil {
			log.Error("pprof stopped", "err", err)
		}
	}()
}
