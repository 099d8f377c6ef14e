package fleet

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/migrate"

	"github.com/quota-platform/quota/migrate/jobs"
)

// Instance is one instance's own view of itself.
type Instance struct {
	URL           string    `json:"url"`
	Name          string    `json:"name"`
	Version       string    `json:"version"`
	Revision      string    `json:"revision"`
	StartedAt     time.Time `json:"started_at"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	RulesVersion  string    `json:"rules_version"`
	// Ready is what /readyz answers (200), NotReady why not: "draining",
	// or the dependencies that failed. Checks are the readiness checks.
	Ready    bool              `json:"ready"`
	State    string            `json:"state"` // serving | draining
	NotReady string            `json:"not_ready,omitempty"`
	FailMode string            `json:"fail_mode"`
	Checks   map[string]string `json:"checks,omitempty"`
	// Analytics is this instance's analytics flush (nil: analytics off).
	Analytics *Analytics `json:"analytics,omitempty"`
}

// Analytics is an instance's analytics lag: its last flush that failed
// nowhere, how long ago, and the rows still waiting.
type Analytics struct {
	LastFlushAt *time.Time `json:"last_flush_at"`
	LagSeconds  float64    `json:"lag_seconds"`
	PendingRows int64      `json:"pending_rows"`
}

// Endpoint is one backing server and whether it answered now.
type Endpoint struct {
	Name  string `json:"name"` // "master" (Redis) or "shard N" (MySQL)
	Addr  string `json:"addr"`
	Slots string `json:"slots,omitempty"` // a cluster master's
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// Status is what GET /v1/admin/status answers: this instance, and with
// scope "fleet" (the default) what it sees of the fleet.
type Status struct {
	At       time.Time `json:"at"`
	Instance Instance  `json:"instance"`
	// Instances are the heartbeats in Redis (Registry).
	Instances     []Entry             `json:"instances,omitempty"`
	RegistryError string              `json:"registry_error,omitempty"`
	Redis         []Endpoint          `json:"redis,omitempty"`
	RedisMode     string              `json:"redis_mode,omitempty"` // single | cluster
	MySQL         []Endpoint          `json:"mysql,omitempty"`
	TieringOff    bool                `json:"tiering_off,omitempty"`
	Tiers         *migrate.TierCount  `json:"tiers,omitempty"`
	TiersError    string              `json:"tiers_error,omitempty"`
	Cycle         *jobs.FleetProgress `json:"cycle,omitempty"`
	CycleError    string              `json:"cycle_error,omitempty"`
}

// Source gathers an instance's Status. The api fills in what only it
// knows (readiness, draining).
type Source struct {
	Self     func() Instance // version, start, rules version, analytics
	Registry *Registry
	// RedisAddrs are the configured addresses; for a cluster, its masters
	// are found from CLUSTER SLOTS (Cluster set).
	RedisAddrs []string
	Cluster    *redis.ClusterClient
	Ping       func(ctx context.Context, addr string) error // one PING outside any pool
	Shards     []Shard
	// Tiers is the last count of the tiers and Cycle the fleet's current
	// or last cycle (nil with tiering off).
	Tiers func(ctx context.Context) (*migrate.TierCount, error)
	Cycle func(ctx context.Context) (*jobs.FleetProgress, error)
	Now   func() time.Time
}

// Shard is one MySQL shard and the address it is shown by.
type Shard struct {
	Addr string
	DB   *sql.DB
}

func (s *Source) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Status gathers scope "instance" (this instance only: cheap) or "fleet".
// Each part's failure is told in the part; Status itself does not fail.
func (s *Source) Status(ctx context.Context, scope string) Status {
	st := Status{At: s.now().UTC(), Instance: s.Self()}
	if scope == "instance" {
		return st
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if s.Registry == nil {
			return
		}
		list, err := s.Registry.List(ctx)
		st.Instances = list
		if err != nil {
			st.RegistryError = err.Error()
		}
	})
	wg.Go(func() { st.RedisMode, st.Redis = s.redisEndpoints(ctx) })
	wg.Go(func() { st.MySQL = s.mysqlEndpoints(ctx) })
	st.TieringOff = s.Tiers == nil
	wg.Go(func() {
		if s.Tiers == nil {
			return
		}
		tc, err := s.Tiers(ctx)
		st.Tiers = tc
		if err != nil {
			st.TiersError = err.Error()
		}
	})
	wg.Go(func() {
		if s.Cycle == nil {
			return
		}
		c, err := s.Cycle(ctx)
		st.Cycle = c
		if err != nil {
			st.CycleError = err.Error()
		}
	})
	wg.Wait()
	return st
}

// redisEndpoints pings each configured address, or each master of a
// cluster (as CLUSTER SLOTS from any node names them, with their slots).
func (s *Source) redisEndpoints(ctx context.Context) (string, []Endpoint) {
	if s.Cluster == nil {
		out := make([]Endpoint, len(s.RedisAddrs))
		for i, a := range s.RedisAddrs {
			out[i] = s.ping(ctx, Endpoint{Name: "redis", Addr: a})
		}
		return "single", out
	}
	masters, err := s.clusterMasters(ctx)
	if err != nil {
		out := []Endpoint{}
		for _, a := range s.RedisAddrs {
			out = append(out, s.ping(ctx, Endpoint{Name: "node", Addr: a}))
		}
		return "cluster (slot map unavailable: " + err.Error() + ")", out
	}
	var wg sync.WaitGroup
	for i := range masters {
		wg.Go(func() { masters[i] = s.ping(ctx, masters[i]) })
	}
	wg.Wait()
	return "cluster", masters
}

func (s *Source) ping(ctx context.Context, e Endpoint) Endpoint {
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.Ping(pctx, e.Addr); err != nil {
		e.Error = err.Error()
	} else {
		e.OK = true
	}
	return e
}

// clusterMasters asks the configured nodes, one after another, for the
// slot map.
func (s *Source) clusterMasters(ctx context.Context) ([]Endpoint, error) {
	var errs []error
	for _, a := range s.RedisAddrs {
		c := redis.NewClient(&redis.Options{Addr: a, Username: s.Cluster.Options().Username, Password: s.Cluster.Options().Password,
			TLSConfig: s.Cluster.Options().TLSConfig, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, MaxRetries: -1})
		//lint:ignore SA1019 CLUSTER SHARDS needs Redis 7; CLUSTER SLOTS answers on every version quotad supports
		slots, err := c.ClusterSlots(ctx).Result()
		c.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ranges := map[string][]string{}
		for _, sl := range slots {
			if len(sl.Nodes) == 0 {
				continue
			}
			m := sl.Nodes[0].Addr
			ranges[m] = append(ranges[m], fmt.Sprintf("%d-%d", sl.Start, sl.End))
		}
		out := make([]Endpoint, 0, len(ranges))
		for m, r := range ranges {
			sort.Strings(r)
			out = append(out, Endpoint{Name: "master", Addr: m, Slots: strings.Join(r, ",")})
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Slots < out[j].Slots })
		return out, nil
	}
	return nil, errors.Join(errs...)
}

func (s *Source) mysqlEndpoints(ctx context.Context) []Endpoint {
	out := make([]Endpoint, len(s.Shards))
	var wg sync.WaitGroup
	for i, sh := range s.Shards {
		wg.Go(func() {
			e := Endpoint{Name: fmt.Sprintf("shard %d", i), Addr: sh.Addr}
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if err := sh.DB.PingContext(pctx); err != nil {
				e.Error = err.Error()
			} else {
				e.OK = true
			}
			out[i] = e
		})
	}
	wg.Wait()
	return out
}

// MarshalIndent is st as indented JSON (quotactl status --json).
func (st Status) MarshalIndent() ([]byte, error) { return json.MarshalIndent(st, "", "  ") }

// AnalyticsFrom reads an instance's analytics lag from its own registry
// (quota_analytics_last_flush_success_timestamp_seconds and
// quota_analytics_pending_rows); nil when analytics is off.
func AnalyticsFrom(g prometheus.Gatherer, now time.Time) *Analytics {
	mfs, err := g.Gather()
	if err != nil {
		return nil
	}
	var a *Analytics
	for _, mf := range mfs {
		if len(mf.GetMetric()) == 0 {
			continue
		}
		v := mf.GetMetric()[0].GetGauge().GetValue()
		switch mf.GetName() {
		case "quota_analytics_last_flush_success_timestamp_seconds":
			if a == nil {
				a = &Analytics{}
			}
			if v > 0 {
				t := time.UnixMilli(int64(v * 1000)).UTC()
				a.LastFlushAt = &t
				a.LagSeconds = float64(now.Sub(t).Milliseconds()) / 1000
			}
		case "quota_analytics_pending_rows":
			if a == nil {
				a = &Analytics{}
			}
			a.PendingRows = int64(v)
		}
	}
	return a
}
