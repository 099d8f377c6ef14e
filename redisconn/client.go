// Package redisconn makes quotad's Redis clients from its settings: one
// Redis, a Redis Cluster (several addresses, or one configuration endpoint),
// or a master found through Sentinel; with an ACL user, a password file and
// TLS. It also probes Redis outside go-redis' pool, for the circuit breaker
// and the fleet's status, and follows a cluster's failovers.
package redisconn

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/tick"
)

// New returns a client of the Redis s names, with every connection option
// of s (QUOTA_REDIS_*): every Redis client quotad makes comes from here.
func New(s config.Settings) redis.UniversalClient {
	return redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:        s.RedisAddrs,
		Password:     s.RedisPassword,
		DB:           s.RedisDB,
		DialTimeout:  s.RedisTimeout,
		ReadTimeout:  s.RedisTimeout,
		WriteTimeout: s.RedisTimeout,
		PoolTimeout:  s.RedisTimeout,
		PoolSize:     s.RedisPoolSize,
		// A caller's deadline bounds the socket reads and writes too, not
		// only the wait for a pooled connection: a check that waited for a
		// connection must not then get a fresh ReadTimeout of its own
		// (hot.Options.CallTimeout bounds a check's call as a whole).
		ContextTimeoutEnabled: true,
		// Failed dials must not trip go-redis' dial gate (dial.go).
		Dialer: tlsDialer(s.RedisTimeout, s.RedisTLSConfig),
		// No idle connections kept warm: each one lost in an outage would
		// be re-dialled at once, for nothing.
		MinIdleConns: 0,
		// One dial attempt per call: with Redis down a check fails within one
		// timeout and the fail mode answers, instead of five retries.
		DialerRetries: 1,
		// A check is not retried: a retry would double its latency and the
		// fail mode answers it instead.
		MaxRetries: -1,
		// TLS (tls.go), ACL user, Sentinel and a cluster configuration endpoint.
		Username:         s.RedisUsername,
		MasterName:       s.RedisSentinelMaster,
		SentinelPassword: s.RedisSentinelPassword,
		IsClusterMode:    s.RedisCluster,
		TLSConfig:        s.RedisTLSConfig,
	})
}

// FollowFailovers reloads a Redis Cluster client's slot map every second
// until ctx ends (nothing for a single Redis) and returns rdb. go-redis
// reloads it on its own only on a MOVED reply or once a minute, and a dead
// master answers nothing: a client that sends nothing else to the promoted
// replica (the migration's, analytics') would keep failing on the dead
// address for up to a minute. The checks' client also reloads from the
// breaker's probe, within 200 ms (ClusterProbe). A reload is one CLUSTER
// SLOTS to one node.
func FollowFailovers(ctx context.Context, rdb redis.UniversalClient) redis.UniversalClient {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return rdb
	}
	go tick.Every(ctx, time.Second, func() { cc.ReloadState(ctx) })
	return rdb
}
