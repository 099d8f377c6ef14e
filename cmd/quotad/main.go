// Command quotad is the quota server: limit checks over HTTP, rules, and
// (with `quotad migrate-schema`) the MySQL schema of every shard.
package main

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
	_ "time/tzdata" // QUOTA_TIMEZONE on a host without /usr/share/zoneinfo

	_ "github.com/go-sql-driver/mysql" // the "mysql" driver
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/quota-platform/quota/analytics"
	"github.com/quota-platform/quota/api"
	"github.com/quota-platform/quota/apps"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/gcfloor"
	"github.com/quota-platform/quota/internal/version"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/metrics"
	"github.com/quota-platform/quota/redisconn"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/schedule"
	sqlschema "github.com/quota-platform/quota/sql"
	"github.com/quota-platform/quota/tiers/cold"
	"github.com/quota-platform/quota/tiers/hot"
)

func main() {
	cmd := "serve"
	if len(os.Args) > 1 {
		cmd = os.Args[1]
	}
	var err error
	switch cmd {
	case "serve":
		err = serve()
	case "migrate-schema":
		err = migrateSchema()
	case "version":
		fmt.Println("quotad", version.Get())
		return
	case "healthcheck":
		err = healthcheck(os.Args[2:])
	case "-h", "--help", "help":
		fmt.Println("usage: quotad [serve | migrate-schema | version | healthcheck [URL]]\nconfiguration: QUOTA_* environment variables (see README.md)")
		return
	default:
		err = fmt.Errorf("unknown command %q (want serve, migrate-schema, version or healthcheck)", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "quotad:", err)
		os.Exit(1)
	}
}

func openShards(dsns []string) ([]*sql.DB, error) {
	dbs := make([]*sql.DB, 0, len(dsns))
	for i, dsn := range dsns {
		dsn, err := cold.ShardDSN(dsn)
		if err != nil {
			return nil, fmt.Errorf("QUOTA_MYSQL_SHARDS entry %d: %w", i, err)
		}
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return nil, fmt.Errorf("QUOTA_MYSQL_SHARDS entry %d: %w", i, err)
		}
		db.SetMaxOpenConns(32)
		db.SetMaxIdleConns(8)
		db.SetConnMaxLifetime(5 * time.Minute)
		dbs = append(dbs, db)
	}
	return dbs, nil
}

func migrateSchema() error {
	s, err := config.Load(os.Getenv)
	if err != nil {
		return err
	}
	dbs, err := openShards(s.MySQLShards)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i, db := range dbs {
		applied, err := sqlschema.Apply(ctx, db)
		if err != nil {
			return fmt.Errorf("shard %d: %w", i, err)
		}
		fmt.Printf("shard %d: %d schema file(s) applied %v\n", i, len(applied), applied)
		db.Close()
	}
	return nil
}

func serve() error {
	s, err := config.Load(os.Getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: s.LogLevel}))
	// A small live heap under a steady check rate would otherwise be
	// collected many times a second, each collection a burst of latency
	// for the checks in flight (internal/gcfloor).
	defer gcfloor.Start(uint64(s.GCHeapFloorMB) << 20).Stop()
	build := version.Get()
	tp, stopTracing, err := startTracing(s, build.Version, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	files, err := readStartFiles(s)
	if err != nil {
		return err
	}
	rdb := redisconn.New(s)
	defer rdb.Close()
	dbs, err := openShards(s.MySQLShards)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	redisconn.FollowFailovers(ctx, rdb)
	if err := prepareSchema(ctx, s, dbs, log); err != nil {
		return err
	}
	den := newDenialCache(s, rdb, log)
	hot := hot.NewStore(rdb, hot.Options{Prefix: s.RedisKeyPrefix, Jitter: s.TTLJitter, Refunded: den.invalidate,
		WaitReplicas: s.RedisWaitReplicas, WaitTimeout: s.RedisWaitTimeout, CallTimeout: s.RedisTimeout})
	reg := prometheus.NewRegistry()
	routed, tiersAdmin, stopTiering, err := startTiering(ctx, s, hot, dbs, reg, den.invalidate, log)
	if err != nil {
		return err
	}
	defer stopTiering()
	lim, nearest, err := newLimiter(ctx, s, newCheckStore(s, rdb, routed, tp), rdb, files.set, reg, log)
	if err != nil {
		return err
	}
	if err := hot.Load(ctx); err != nil {
		log.Warn("redis not reachable at start; checks follow QUOTA_FAIL_MODE until it is", "err", err, "fail_mode", s.FailMode)
	}
	m := newMetrics(reg, build, files.set.Version)
	rw, err := startRules(ctx, s, rdb, lim, files.state, m, log)
	if err != nil {
		return err
	}
	m.ZeroChecks(ruleNames(lim.Rules()))
	plans := startAppPlans(ctx, s, rdb, lim, log)
	den.start(ctx, lim, reg, s.RulesPoll)
	an, stopAnalytics, err := startAnalytics(s, dbs, reg, log)
	if err != nil {
		return err
	}
	usage, stats, whoThrottled := analyticsDeps(an)
	checks, stopChecks := newCheckPath(s, lim)
	defer stopChecks()
	ready := readiness(hot, dbs)
	fm := joinFleet(s, rdb, dbs, lim, tiersAdmin, reg, log) // quotactl status (cmd/quotad/fleet.go)
	defer fm.leave()
	probeDependencies(ctx, ready, metrics.NewDependencyUp(reg))
	srv := api.New(api.Deps{
		Settings:     s,
		Limiter:      lim,
		Checks:       checks,
		Metrics:      m,
		Gatherer:     reg,
		Log:          log,
		PersistRules: rw.persist,
		Ready:        ready,
		Usage:        usage,
		Analytics:    stats,
		Throttled:    whoThrottled,
		Keys:         apps.New(dbs, nil),
		Tiers:        tiersAdmin,
		Status:       fm.source,
		AppPlans:     plans,
		Nearest:      nearest,
	})
	go reloadOnHangup(ctx, s.RulesPath, lim, rw.publish, m, log)
	rls, err := startEnvoyService(ctx, s, srv, files.envoyConf, den.clear, log)
	if err != nil {
		return err
	}
	startPprof(ctx, s, log)
	edge := srv.NewHTTPServer(api.EdgeOptions{Fallback: tracedHandler(srv, tp), ChecksThroughFallback: tp != nil})
	err = listenAndServe(ctx, s, edge, func() { srv.StartDraining(); fm.drain() }, rls, log)
	// No check runs any more: write what analytics still holds.
	stopAnalytics()
	return err
}

// startAnalytics wires analytics (nil with QUOTA_ANALYTICS=off), starts
// its periodic flush and the rollup cron job, and returns the
// function that stops both and flushes what is pending (on SIGTERM/SIGINT).
func startAnalytics(s config.Settings, dbs []*sql.DB, reg prometheus.Registerer, log *slog.Logger) (*analytics.Analytics, func(), error) {
	if !s.Analytics {
		return nil, func() {}, nil
	}
	// Analytics has a Redis client of its own: its pipelines are larger and
	// may take longer than a check's QUOTA_REDIS_TIMEOUT.
	as := s
	as.RedisTimeout, as.RedisPoolSize = 5*time.Second, 16
	ardb := redisconn.FollowFailovers(context.Background(), redisconn.New(as))
	an, err := analytics.New(analytics.Options{
		DBs:              dbs,
		Redis:            ardb,
		KeyPrefix:        s.RedisKeyPrefix,
		FlushEvery:       s.AnalyticsFlush,
		MaxPendingRows:   s.AnalyticsBufferMax,
		RowsPerStatement: s.AnalyticsRowsPerStatement,
		FlushDuty:        s.AnalyticsFlushDuty,
		HoldOpenMinute:   s.AnalyticsHoldMinute,
		HLLDenseAt:       cmp.Or(s.AnalyticsHLLDenseAt, -1), // 0: never
		IfaceUsersEvery:  s.AnalyticsIfaceUsersEvery,
		Location:         s.Location,
		Registerer:       reg,
		Log:              log,
	})
	if err != nil {
		ardb.Close()
		return nil, nil, err
	}
	go an.Flusher.Run(context.Background()) // ended by an.Flusher.Close
	// Who is throttled: its own flushes, the last one when stopped.
	thCtx, stopThrottled := context.WithCancel(context.Background())
	thDone := make(chan struct{})
	go func() {
		defer close(thDone)
		an.Throttled.Run(thCtx, s.AnalyticsFlush, func(err error) {
			log.Warn("analytics: who-is-throttled flush failed; its counts are retried at the next", "err", err)
		})
	}()
	cr := schedule.New(log, s.Location)
	// Shutdown cancels a running rollup rather than wait for it: the seal
	// of a finished day's per-user figures can take minutes, and a cancelled
	// one loses nothing (each app's is one transaction; the next run resumes).
	jobs, cancelJobs := context.WithCancel(context.Background())
	if _, err := cr.AddFunc(s.RollupSchedule, func() {
		ctx, cancel := context.WithTimeout(jobs, 10*time.Minute)
		defer cancel()
		start := time.Now()
		res, err := an.Rollup.Run(ctx)
		// seconds: how long the job held MariaDB (a finished day's seal can
		// take minutes), so that its load can be told from the checks'.
		if err != nil {
			log.Error("analytics rollup failed; the next run resumes it", "err", err, "seconds", time.Since(start).Seconds())
			return
		}
		log.Info("analytics rollup", "periods", res.Periods, "points_moved", res.Moved,
			"user_days_sealed", res.SealedDays, "user_chunk_merges", res.UserMerges, "seconds", time.Since(start).Seconds())
	}); err != nil {
		cancelJobs()
		stopThrottled()
		<-thDone
		ardb.Close()
		return nil, nil, fmt.Errorf("QUOTA_ROLLUP_SCHEDULE: %w", err)
	}
	cr.Start()
	stop := func() {
		cancelJobs()
		<-cr.Stop().Done()
		stopThrottled()
		<-thDone
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := an.Flusher.Close(ctx); err != nil {
			log.Error("analytics: final flush failed; calls since the last flush are lost", "err", err)
		} else {
			log.Info("analytics flushed")
		}
		ardb.Close()
	}
	return an, stop, nil
}

func readiness(hot *hot.Store, dbs []*sql.DB) []api.ReadinessCheck {
	checks := []api.ReadinessCheck{{Name: "redis", Check: hot.Ping}}
	for i, db := range dbs {
		checks = append(checks, api.ReadinessCheck{
			Name:  fmt.Sprintf("mysql_shard_%d", i),
			Check: db.PingContext,
		})
	}
	return checks
}

// reloadOnHangup re-reads the rules file on SIGHUP and publishes it (to the
// shared store and this instance, or this instance only: startRules),
// keeping the rules in force when the file is invalid.
func reloadOnHangup(ctx context.Context, path string, lim *limiter.Limiter, publish func(context.Context, *rules.Set) error, m *metrics.Metrics, log *slog.Logger) {
	onHangup(ctx, func() {
		set, err := rules.ReadFile(path)
		if err == nil {
			err = publish(ctx, set)
		}
		if err != nil {
			m.RulesReloads.WithLabelValues("error").Inc()
			log.Error("rules reload failed; keeping the rules in force", "err", err, "version", lim.Rules().Version)
			return
		}
		m.RulesReloads.WithLabelValues("ok").Inc()
		m.SetRulesVersion(set.Version)
		log.Info("rules reloaded", "version", set.Version, "rules", len(set.Rules))
	})
}

// onHangup calls reload on every SIGHUP until ctx ends.
func onHangup(ctx context.Context, reload func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		reload()
	}
}

// listenAndServe serves hs (and rls, when not nil) until ctx ends, then
// drains both; when the HTTP server stops on its own, rls stops with it.
func listenAndServe(ctx context.Context, s config.Settings, hs *fasthttp.Server, notReady func(), rls *grpcServer, log *slog.Logger) error {
	ln, err := net.Listen("tcp", s.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.Listen, err)
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("quotad listening", "addr", ln.Addr().String(), "fail_mode", s.FailMode, "version", version.Get().Version)
	servers := []stopper{httpStopper(hs)}
	if rls != nil {
		servers = append(servers, rls.stopper)
		httpNotReady := notReady
		notReady = func() { httpNotReady(); rls.notReady() }
	}
	select {
	case err := <-errc:
		if rls != nil {
			rls.notReady()
			_ = rls.stopper.stop(context.Background())
		}
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "drain", s.Drain.String())
	return drain(log, notReady, drainWait(s.Drain), 10*time.Second, servers...)
}
