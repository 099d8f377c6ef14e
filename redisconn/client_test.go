package redisconn_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/redisconn"
)

// QUOTA_REDIS_DB reaches the client: quotad's keys land in that database.
func TestNew_UsesTheConfiguredDatabase(t *testing.T) {
	t.Parallel()
	s := config.Defaults()
	s.RedisDB = 13
	rdb := redisconn.New(s)
	defer rdb.Close()
	c, ok := rdb.(*redis.Client)
	if !ok {
		t.Fatalf("a single address gave %T, want *redis.Client", rdb)
	}
	if c.Options().DB != 13 {
		t.Fatalf("client DB %d, want 13", c.Options().DB)
	}
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis at %v: %v", s.RedisAddrs, err)
	}
	// The connection really selected it: CLIENT INFO names db=13.
	info, err := rdb.ClientInfo(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if info.DB != 13 {
		t.Fatalf("connection on db %d, want 13", info.DB)
	}
}
