package main

import (
	"context"
	"database/sql"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/api"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/fleet"
	"github.com/quota-platform/quota/internal/version"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/migrate"
	"github.com/quota-platform/quota/migrate/worker"
	"github.com/quota-platform/quota/redisconn"
)

// fleetMember is this instance in the fleet: its heartbeat in Redis and
// the status it answers (GET /v1/admin/status, quotactl status).
type fleetMember struct {
	source   *fleet.Source
	registry *fleet.Registry
	draining atomic.Bool
	stop     context.CancelFunc
	stopped  chan struct{}
}

// advertiseURL is QUOTA_ADVERTISE_URL, or http://QUOTA_LISTEN with an
// unspecified host replaced by the hostname.
func advertiseURL(s config.Settings) string {
	if s.AdvertiseURL != "" {
		return s.AdvertiseURL
	}
	host, port, err := net.SplitHostPort(s.Listen)
	if err != nil {
		return "http://" + s.Listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}

// joinFleet starts the heartbeat (every 5 s until leave) and builds the
// status source.
func joinFleet(s config.Settings, rdb redis.UniversalClient, dbs []*sql.DB, lim *limiter.Limiter, tiersAdmin api.TiersAdmin, g prometheus.Gatherer, log *slog.Logger) *fleetMember {
	build := version.Get()
	started := time.Now()
	host, _ := os.Hostname()
	url := advertiseURL(s)
	fm := &fleetMember{stopped: make(chan struct{})}
	state := func() string {
		if fm.draining.Load() {
			return "draining"
		}
		return "serving"
	}
	fm.registry = &fleet.Registry{RDB: rdb, Prefix: s.RedisKeyPrefix, Self: func() fleet.Entry {
		return fleet.Entry{URL: url, Name: host, Version: build.Version, StartedAt: started.UTC(), RulesVersion: lim.Rules().Version, State: state()}
	}}
	fm.source = &fleet.Source{
		Self: func() fleet.Instance {
			in := fleet.Instance{URL: url, Name: host, Version: build.Version, Revision: build.Revision, StartedAt: started.UTC(),
				UptimeSeconds: time.Since(started).Round(time.Second).Seconds(), RulesVersion: lim.Rules().Version}
			if s.Analytics {
				in.Analytics = fleet.AnalyticsFrom(g, time.Now())
			}
			return in
		},
		Registry: fm.registry, RedisAddrs: s.RedisAddrs, Ping: redisconn.Ping(s),
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		fm.source.Cluster = cc
	}
	for i, db := range dbs {
		addr := "shard " + strconv.Itoa(i)
		if i < len(s.MySQLShards) {
			if c, err := mysql.ParseDSN(s.MySQLShards[i]); err == nil {
				addr = c.Addr + "/" + c.DBName
			}
		}
		fm.source.Shards = append(fm.source.Shards, fleet.Shard{Addr: addr, DB: db})
	}
	if a, ok := tiersAdmin.(worker.Admin); ok {
		fm.source.Tiers = func(ctx context.Context) (*migrate.TierCount, error) { return a.W.Mover.LastCount(ctx, time.Now()) }
		fm.source.Cycle = a.FleetCycle
	}
	ctx, cancel := context.WithCancel(context.Background())
	fm.stop = cancel
	go func() {
		defer close(fm.stopped)
		fm.registry.Run(ctx, func(err error) { log.Warn("fleet heartbeat not written", "err", err) })
	}()
	return fm
}

// drain marks the instance draining in its heartbeat at once.
func (fm *fleetMember) drain() {
	fm.draining.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = fm.registry.Beat(ctx, "")
}

// leave stops the heartbeat and removes it: the instance has stopped.
func (fm *fleetMember) leave() {
	fm.stop()
	<-fm.stopped
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	fm.registry.Leave(ctx)
}
