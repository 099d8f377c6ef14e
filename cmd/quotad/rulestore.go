package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/metrics"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/rulesync"
)

// rulesWiring is how rules change on this instance (QUOTA_RULES_STORE).
type rulesWiring struct {
	// persist saves rules accepted by PUT /v1/rules before they take
	// effect (api.Deps.PersistRules).
	persist func(*rules.Set) error
	// publish puts rules read from the file on SIGHUP in force.
	publish func(context.Context, *rules.Set) error
}

// startRules wires the rules store. With QUOTA_RULES_STORE=file each
// instance keeps its own rules: PUT writes its file, SIGHUP reads it. With
// redis (the default) the rules in force are the shared store's: this
// instance starts with them (seeding an empty store from its file), follows
// every new version within QUOTA_RULES_POLL, and PUT and SIGHUP write the
// store, which every instance follows; PUT still writes this instance's file
// too, so that a restart with Redis down starts from the latest rules.
func startRules(ctx context.Context, s config.Settings, rdb redis.UniversalClient, lim *limiter.Limiter, m *metrics.Metrics, log *slog.Logger) rulesWiring {
	writeFile := func(set *rules.Set) error { return rules.WriteFile(s.RulesPath, set) }
	apply := func(set *rules.Set) error {
		if err := lim.SetRules(set); err != nil {
			return err
		}
		m.SetRulesVersion(set.Version)
		return nil
	}
	if s.RulesStore == "file" {
		return rulesWiring{persist: writeFile, publish: func(_ context.Context, set *rules.Set) error { return apply(set) }}
	}
	host, _ := os.Hostname()
	y := &rulesync.Syncer{
		Store:   rulesync.NewStore(rdb, s.RedisKeyPrefix),
		Current: lim.Rules,
		Check:   lim.CheckRules,
		Apply: func(set *rules.Set) error {
			err := apply(set)
			if err == nil {
				m.RulesReloads.WithLabelValues("ok").Inc()
			}
			return err
		},
		Log:  log,
		Name: host + " " + s.Listen,
	}
	bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if set := y.Bootstrap(bctx, lim.Rules()); set != lim.Rules() {
		if err := apply(set); err != nil { // Bootstrap checked it: cannot fail
			log.Error("rules from the shared store not applied", "err", err)
		}
	}
	cancel()
	go y.Run(ctx, s.RulesPoll)
	publish := func(ctx context.Context, set *rules.Set) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return y.Publish(ctx, set)
	}
	return rulesWiring{
		publish: publish,
		persist: func(set *rules.Set) error {
			// Not ctx: a PUT during the drain wait, after SIGTERM, still counts.
			if err := publish(context.Background(), set); err != nil {
				return err
			}
			if err := writeFile(set); err != nil {
				// The rules are in force everywhere; only the local bootstrap copy is stale.
				log.Error("rules written to the shared store but not to the rules file", "err", err, "path", s.RulesPath)
			}
			return nil
		},
	}
}
