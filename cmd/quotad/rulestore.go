package main

import (
	"context"
	"fmt"
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

// startRules wires the rules store. The rules file is the operator's and
// is never written. With QUOTA_RULES_STORE=file each instance keeps its own
// rules: PUT and SIGHUP change this instance only. With redis (the default)
// the rules in force are the shared store's: this instance offers its file
// at start (in force for every instance unless the store has had that
// version in force before: rulesync.Store.Offer), follows every new version
// within QUOTA_RULES_POLL, and PUT and SIGHUP write the store, which every
// instance follows. In both modes the rules put in force are kept in
// QUOTA_RULES_STATE when it is set (rulestate.go), for a start where the
// store cannot decide.
func startRules(ctx context.Context, s config.Settings, rdb redis.UniversalClient, lim *limiter.Limiter, st *ruleState, m *metrics.Metrics, log *slog.Logger) (rulesWiring, error) {
	file := lim.Rules()
	apply := func(set *rules.Set) error {
		if err := lim.SetRules(set); err != nil {
			return err
		}
		m.SetRulesVersion(set.Version)
		if err := st.keep(set); err != nil {
			log.Error("rules in force but not kept in QUOTA_RULES_STATE", "err", err, "path", s.RulesState)
		}
		return nil
	}
	if s.RulesStore == "file" {
		if set, kept := st.start(file); kept {
			if err := apply(set); err != nil {
				return rulesWiring{}, fmt.Errorf("QUOTA_RULES_STATE %s: %w", s.RulesState, err)
			}
			log.Info("the rules kept in QUOTA_RULES_STATE are in force (the rules file is unchanged since they were put in force)",
				"version", set.Version, "file_version", file.Version, "path", s.RulesState)
		}
		return rulesWiring{
			persist: st.keep,
			publish: func(_ context.Context, set *rules.Set) error {
				return st.fromFile(set, func() error { return apply(set) })
			},
		}, nil
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
		Offline: func(file *rules.Set) *rules.Set {
			set, _ := st.start(file)
			return set
		},
	}
	bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if set := y.Bootstrap(bctx, file); set != lim.Rules() {
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
		publish: func(ctx context.Context, set *rules.Set) error {
			return st.fromFile(set, func() error { return publish(ctx, set) })
		},
		// Not ctx: a PUT during the drain wait, after SIGTERM, still counts.
		persist: func(set *rules.Set) error { return publish(context.Background(), set) },
	}, nil
}
