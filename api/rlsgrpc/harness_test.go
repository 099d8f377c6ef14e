package rlsgrpc_test

import (
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/tiers/hot"
)

// start is a fixed instant 250 ms into an hour, so hourly windows have a
// known reset.
var start = time.Date(2026, 11, 23, 10, 0, 0, 250_000_000, time.UTC)

// harnessConfig is what a harnessOption may change before the service is built.
type harnessConfig struct {
	settings config.Settings
	hot      hot.Options
	client   redis.UniversalClient
}

type harnessOption func(*harnessConfig)

func failMode(m config.FailMode) harnessOption {
	return func(c *harnessConfig) { c.settings.FailMode = m }
}

func settings(fn func(*config.Settings)) harnessOption {
	return func(c *harnessConfig) { fn(&c.settings) }
}

func redisClient(rc redis.UniversalClient) harnessOption {
	return func(c *harnessConfig) { c.client = rc }
}

func itoa(n int) string { return strconv.Itoa(n) }
