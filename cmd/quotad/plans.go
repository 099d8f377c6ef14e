package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/appplans"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/rules"
)

// sharedPlans is api.AppPlans over the shared store: a change is written
// to Redis (every instance follows within QUOTA_RULES_POLL) and put in
// force here before the answer.
type sharedPlans struct {
	store *appplans.Store
	sync  *appplans.Syncer
}

func (p *sharedPlans) SetPlan(ctx context.Context, app, plan string) error {
	if _, err := p.store.SetPlan(ctx, app, plan); err != nil {
		return err
	}
	return p.sync.Load(ctx)
}

func (p *sharedPlans) SetOverride(ctx context.Context, app, rule string, spec rules.LimitsSpec) error {
	if _, err := p.store.SetOverride(ctx, app, rule, spec); err != nil {
		return err
	}
	return p.sync.Load(ctx)
}

func (p *sharedPlans) DeleteOverride(ctx context.Context, app, rule string) error {
	if _, err := p.store.DeleteOverride(ctx, app, rule); err != nil {
		return err
	}
	return p.sync.Load(ctx)
}

// startAppPlans loads the apps' plans and overrides from the shared store
// and follows it every QUOTA_RULES_POLL. With Redis down at start-up every
// app starts on the default plan until the store answers.
func startAppPlans(ctx context.Context, s config.Settings, rdb redis.UniversalClient, lim *limiter.Limiter, log *slog.Logger) *sharedPlans {
	store := appplans.NewStore(rdb, s.RedisKeyPrefix)
	y := &appplans.Syncer{Store: store, Apply: lim.SetAssignments, Log: log}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if err := y.Load(lctx); err != nil {
		log.Warn("plans store unreachable at start: apps are on the default plan until it answers", "err", err)
	}
	cancel()
	go y.Run(ctx, s.RulesPoll)
	return &sharedPlans{store: store, sync: y}
}
