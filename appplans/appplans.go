// Package appplans keeps which plan each app is on, and the overrides of
// one app's limits, the same on every quotad instance. They live in one
// Redis hash (one key, so one slot on a Redis Cluster) with a sequence
// number that every write increments; each instance polls the sequence
// (QUOTA_RULES_POLL) and, when it moved, reads the whole hash and puts it
// in force. A check never reads Redis for them: the limiter holds them.
package appplans

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/tick"
	"github.com/quota-platform/quota/rules"
)

// ErrUnavailable is returned (wrapped) when the shared store cannot be
// reached: nothing changed anywhere.
var ErrUnavailable = errors.New("the shared plans store (Redis) is unreachable")

// Field prefixes of the hash: an app's plan ("p:" app), an override of one
// rule ("o:" rule ":" app: a rule name has no ':', an app id may).
const (
	planField     = "p:"
	overrideField = "o:"
	seqField      = "seq"
)

var (
	//go:embed write.lua
	writeSource string
	writeScript = redis.NewScript(writeSource)
)

// Store is the shared hash <prefix>appplans.
type Store struct {
	rdb redis.UniversalClient
	key string
}

// NewStore returns the store under prefix (QUOTA_REDIS_KEY_PREFIX).
func NewStore(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: rdb, key: prefix + "appplans"}
}

// SetPlan puts app on plan (rules.DefaultPlan: on no plan) and returns the
// new sequence. The caller validates plan.
func (s *Store) SetPlan(ctx context.Context, app, plan string) (int64, error) {
	v := plan
	if plan == rules.DefaultPlan {
		v = ""
	}
	return s.write(ctx, planField+app, v)
}

// SetOverride replaces rule's limits for app.
func (s *Store) SetOverride(ctx context.Context, app, rule string, spec rules.LimitsSpec) (int64, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return 0, fmt.Errorf("override: %w", err)
	}
	return s.write(ctx, overrideKey(app, rule), string(b))
}

// DeleteOverride gives app rule's limits of its plan again.
func (s *Store) DeleteOverride(ctx context.Context, app, rule string) (int64, error) {
	return s.write(ctx, overrideKey(app, rule), "")
}

func (s *Store) write(ctx context.Context, field, value string) (int64, error) {
	seq, err := writeScript.Run(ctx, s.rdb, []string{s.key}, field, value).Int64()
	if err != nil {
		return 0, fmt.Errorf("%w: write: %v", ErrUnavailable, err)
	}
	return seq, nil
}

// Seq reads the sequence number (0: nothing was ever written).
func (s *Store) Seq(ctx context.Context) (int64, error) {
	v, err := s.rdb.HGet(ctx, s.key, seqField).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%w: read: %v", ErrUnavailable, err)
	}
	return v, nil
}

// Get reads every assignment and override. A field that does not parse
// (written by hand) is skipped and reported in bad.
func (s *Store) Get(ctx context.Context) (a *rules.Assignments, bad []string, err error) {
	all, err := s.rdb.HGetAll(ctx, s.key).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: read: %v", ErrUnavailable, err)
	}
	a = &rules.Assignments{Plans: map[string]string{}, Overrides: map[string]map[string]rules.LimitsSpec{}}
	for f, v := range all {
		switch {
		case f == seqField:
			a.Seq, _ = strconv.ParseInt(v, 10, 64)
		case strings.HasPrefix(f, planField):
			a.Plans[f[len(planField):]] = v
		case strings.HasPrefix(f, overrideField):
			rule, app, ok := strings.Cut(f[len(overrideField):], ":")
			var spec rules.LimitsSpec
			if !ok || json.Unmarshal([]byte(v), &spec) != nil {
				bad = append(bad, f)
				continue
			}
			if a.Overrides[app] == nil {
				a.Overrides[app] = map[string]rules.LimitsSpec{}
			}
			a.Overrides[app][rule] = spec
		default:
			bad = append(bad, f)
		}
	}
	return a, bad, nil
}

// Syncer keeps this instance's assignments equal to the store's.
type Syncer struct {
	Store *Store
	// Apply puts assignments in force (limiter.SetAssignments).
	Apply func(*rules.Assignments)
	Log   *slog.Logger

	mu   sync.Mutex
	seq  int64
	down bool
}

// Load reads the store now and puts what it holds in force, whatever the
// sequence: at start-up and after a write here.
func (y *Syncer) Load(ctx context.Context) error {
	y.mu.Lock()
	defer y.mu.Unlock()
	return y.load(ctx)
}

func (y *Syncer) load(ctx context.Context) error {
	a, bad, err := y.Store.Get(ctx)
	if err != nil {
		return err
	}
	if len(bad) > 0 {
		y.Log.Error("the shared plans store holds fields that do not parse: ignored", "fields", len(bad), "first", bad[0])
	}
	y.seq = a.Seq
	y.Apply(a)
	return nil
}

// Run polls the store every period until ctx ends.
func (y *Syncer) Run(ctx context.Context, every time.Duration) {
	tick.Every(ctx, every, func() {
		pctx, cancel := context.WithTimeout(ctx, every)
		defer cancel()
		y.Poll(pctx)
	})
}

// Poll reads the sequence and, when it moved, the whole store.
func (y *Syncer) Poll(ctx context.Context) {
	y.mu.Lock()
	defer y.mu.Unlock()
	seq, err := y.Store.Seq(ctx)
	if err == nil && seq != y.seq {
		err = y.load(ctx)
	}
	switch {
	case err != nil && !y.down:
		y.down = true
		y.Log.Warn("plans store unreachable: keeping the plans and overrides in force", "err", err)
	case err == nil && y.down:
		y.down = false
		y.Log.Info("plans store reachable again", "seq", y.seq)
	}
}

// Shared changes plans and overrides for the admin API: each change is
// written to the store (every instance follows within its poll) and put in
// force on this instance before it returns.
type Shared struct {
	Store  *Store
	Syncer *Syncer
}

// SetPlan puts app on plan everywhere.
func (p *Shared) SetPlan(ctx context.Context, app, plan string) error {
	if _, err := p.Store.SetPlan(ctx, app, plan); err != nil {
		return err
	}
	return p.Syncer.Load(ctx)
}

// SetOverride replaces rule's limits for app everywhere.
func (p *Shared) SetOverride(ctx context.Context, app, rule string, spec rules.LimitsSpec) error {
	if _, err := p.Store.SetOverride(ctx, app, rule, spec); err != nil {
		return err
	}
	return p.Syncer.Load(ctx)
}

// DeleteOverride removes app's override of rule everywhere.
func (p *Shared) DeleteOverride(ctx context.Context, app, rule string) error {
	if _, err := p.Store.DeleteOverride(ctx, app, rule); err != nil {
		return err
	}
	return p.Syncer.Load(ctx)
}

func overrideKey(app, rule string) string { return overrideField + rule + ":" + app }
