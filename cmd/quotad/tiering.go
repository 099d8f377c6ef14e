package main

import (
	"context"
	"database/sql"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quota-platform/quota/api"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/tick"
	"github.com/quota-platform/quota/migrate"
	"github.com/quota-platform/quota/migrate/activity"
	"github.com/quota-platform/quota/migrate/jobs"
	"github.com/quota-platform/quota/migrate/worker"
	"github.com/quota-platform/quota/redisconn"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/cold"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/routing"
	"github.com/quota-platform/quota/tiers/warm"
)

// startTiering builds the tier router over hs (QUOTA_TIERING=on), the
// activity counter, and the migration worker (scheduled cycles and on-call
// moves). It returns the store checks go to (hot itself when tiering is
// off), the admin hooks (nil when off) and the function that stops the
// worker and flushes the activity. movedFromHot is called after a move out
// of hot (the denial cache's invalidation).
func startTiering(ctx context.Context, s config.Settings, hs *hot.Store, dbs []*sql.DB, reg prometheus.Registerer, movedFromHot func(), log *slog.Logger) (tiers.Store, api.TiersAdmin, func(), error) {
	if !s.Tiering {
		return hs, nil, func() {}, nil
	}
	wo := warm.Options{Prefix: s.RedisKeyPrefix}
	warm := warm.NewStore(hs.Client(), wo)
	if err := warm.Load(ctx, hs.MoveScripts()...); err != nil {
		log.Warn("redis not reachable at start (warm script)", "err", err)
	}
	cold := cold.NewStore(dbs, cold.Options{})
	router := routing.NewRouter(hs, warm, cold)
	router.ColdHints = routing.NewColdHints(s.ColdHints)
	// Moves run on a Redis client of their own: their pipelines are larger
	// than a check's and may take longer than QUOTA_REDIS_TIMEOUT.
	ms := s
	ms.RedisTimeout, ms.RedisPoolSize = 10*time.Second, 8
	mrdb := redisconn.FollowFailovers(ctx, redisconn.New(ms))
	mhot := hot.NewStore(mrdb, hot.Options{Prefix: s.RedisKeyPrefix, Jitter: s.TTLJitter})
	mwarm := warm.WithClient(mrdb) // shares the checks' cell locks
	mover := &migrate.Mover{
		RDB: mrdb, Prefix: s.RedisKeyPrefix, Warm: mwarm, Cold: cold,
		Hot:          &hot.Mover{Hot: mhot, Warm: mwarm},
		Metrics:      migrate.NewMetrics(reg),
		ColdHints:    router.ColdHints,
		MovedFromHot: movedFromHot,
	}
	act := &activity.Activity{DBs: dbs}
	router.Calls, router.CallsMinWindow = act.Observe, s.MigrateMinWindow
	host, _ := os.Hostname()
	w := &worker.Worker{
		Mover: mover, Activity: act, DBs: dbs, Log: log,
		Name: host + " " + s.Listen,
		Config: worker.Config{
			Schedule:        s.MigrateSchedule,
			Location:        s.Location,
			HotThreshold:    s.HotThreshold,
			ColdThreshold:   s.ColdThreshold,
			PromoteInterval: s.PromoteInterval,
			DemoteInterval:  s.DemoteInterval,
			// Every instance flushes its activity within ~1 s of a cycle's
			// start (WatchCycles below); the cycle's parts wait for it.
			ActivityWait:   2 * time.Second,
			LogMaxRows:     s.MigrateLogMaxRows,
			PartWorkers:    s.MigratePartWorkers,
			CellsPerSecond: s.MigrateCellsPerSec,
		},
	}
	w.Jobs = &jobs.Jobs{Instance: w.Name, URL: advertiseURL(s)}
	reg.MustRegister(w.Jobs) // quota_job_*: the progress of long jobs
	router.Observe = w.Observe
	stopWorker, err := w.Start(context.Background())
	if err != nil {
		mrdb.Close()
		return nil, nil, nil, err
	}
	// The activity is flushed every minute (and before each cycle).
	flushCtx, stopFlush := context.WithCancel(context.Background())
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		tick.Every(flushCtx, time.Minute, func() {
			if err := act.Flush(flushCtx); err != nil {
				log.Warn("migration activity flush failed; kept for the next one", "err", err)
			}
		})
	}()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		w.WatchCycles(flushCtx, time.Second)
	}()
	stop := func() {
		stopFlush()
		<-flushed
		<-watched
		stopWorker()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := act.Flush(ctx); err != nil {
			log.Error("migration activity: final flush failed", "err", err)
		}
		mrdb.Close()
	}
	return router, worker.Admin{W: w}, stop, nil
}
