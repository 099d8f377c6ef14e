package testenv

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// BenchRedis is a client of a private redis-server, for benchmarks: other
// tenants of the shared one would make the numbers meaningless.
func BenchRedis(b *testing.B) *redis.Client {
	p := StartRedis(b)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	b.Cleanup(func() { rdb.Close() })
	return rdb
}
