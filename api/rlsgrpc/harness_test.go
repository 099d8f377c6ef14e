package rlsgrpc_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers/hot"
)

// start is a fixed instant 250 ms into an hour, so hourly windows have a
// known reset.
var start = time.Date(2026, 11, 23, 10, 0, 0, 250_000_000, time.UTC)

// rlsConfig is what a test may change before newRLS builds the service.
type rlsConfig struct {
	settings  config.Settings
	client    redis.UniversalClient // the limiter's Redis (the test's own by default)
	analytics bool                  // usage and who is throttled counted by analytics, not rlsHarness.usage
}

// newLimiter is a limiter with no rules of its own over the hot store of
// rdb under prefix, as quotad builds it.
func newLimiter(tb testing.TB, rdb redis.UniversalClient, prefix string, clk clock.Clock) *limiter.Limiter {
	set, _ := rules.NewSet(nil)
	lim, err := limiter.New(hot.NewStore(rdb, hot.Options{Prefix: prefix, Jitter: time.Second}), clk, set)
	if err != nil {
		tb.Fatal(err)
	}
	return lim
}
