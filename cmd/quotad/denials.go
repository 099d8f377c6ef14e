package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/denysync"
	"github.com/quota-platform/quota/limiter"
)

// denialCache is the local denial cache (QUOTA_DENY_CACHE_SIZE entries;
// with 0 it holds none but still tells the fleet what invalidates the
// others') and its end of the fleet's invalidations.
type denialCache struct {
	d    *limiter.Denials
	sync *denysync.Sync
	log  *slog.Logger
}

func newDenialCache(s config.Settings, rdb redis.UniversalClient, log *slog.Logger) *denialCache {
	d := limiter.NewDenials(s.DenyCacheSize)
	c := &denialCache{d: d, sync: denysync.New(rdb, s.RedisKeyPrefix, d.Clear), log: log}
	d.Publish = c.invalidate
	return c
}

// invalidate drops the cache here and on every instance (a refund, a
// report call counted in a closed cell). Without Redis the others find
// out by failing to read the key, which drops theirs too.
func (c *denialCache) invalidate() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.sync.Bump(ctx); err != nil {
		c.log.Warn("denial cache: the fleet was not told to drop its cached denials", "err", err)
	}
}

// clear drops the cache here (the envoy configuration changed).
func (c *denialCache) clear() { c.d.Clear() }

// start puts the cache in lim, registers its metrics and follows the
// fleet's invalidations every poll until ctx ends.
func (c *denialCache) start(ctx context.Context, lim *limiter.Limiter, reg prometheus.Registerer, poll time.Duration) {
	pctx, cancel := context.WithTimeout(ctx, poll)
	_ = c.sync.Poll(pctx)
	cancel()
	lim.UseDenials(c.d)
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "quota_deny_cache_hits_total", Help: "Checks denied from the local denial cache, without Redis.",
		}, func() float64 { return float64(c.d.Hits()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "quota_deny_cache_peeks_total", Help: "Checks denied from the local denial cache with their open fixed-window limits read from Redis (a GET, no script).",
		}, func() float64 { return float64(c.d.Peeks()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "quota_deny_cache_entries", Help: "Entries held by the local denial cache (QUOTA_DENY_CACHE_SIZE at most).",
		}, func() float64 { return float64(c.d.Len()) }),
	)
	go c.sync.Run(ctx, poll)
}
