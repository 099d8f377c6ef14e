package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/appplans"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/limiter"
)

// startAppPlans loads the apps' plans and overrides from the shared store
// and follows it every QUOTA_RULES_POLL. With Redis down at start-up every
// app starts on the default plan until the store answers.
func startAppPlans(ctx context.Context, s config.Settings, rdb redis.UniversalClient, lim *limiter.Limiter, log *slog.Logger) *appplans.Shared {
	store := appplans.NewStore(rdb, s.RedisKeyPrefix)
	y := &appplans.Syncer{Store: store, Apply: lim.SetAssignments, Log: log}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if err := y.Load(lctx); err != nil {
		log.Warn("plans store unreachable at start: apps are on the default plan until it answers", "err", err)
	}
	cancel()
	go y.Run(ctx, s.RulesPoll)
	return &appplans.Shared{Store: store, Syncer: y}
}
