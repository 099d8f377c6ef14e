// Package testenv connects tests to the real Redis and MariaDB that
// `make test` makes sure are running, each test in its own key prefix or
// database so that tests run in parallel and re-run cleanly.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisAddr is the Redis the tests use (QUOTA_TEST_REDIS_ADDR, default 127.0.0.1:6379).
func RedisAddr() string {
	if a := os.Getenv("QUOTA_TEST_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// RandomHex returns n random bytes in hex.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Redis returns a client of the test Redis and a key prefix of the test's
// own; the prefix's keys are deleted when the test ends. A Redis that does
// not answer fails the test: CI always has one (run deploy/ensure-services.sh).
func Redis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: RedisAddr(), PoolSize: 64})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("redis at %s: %v (run deploy/ensure-services.sh)", RedisAddr(), err)
	}
	prefix := "t:" + RandomHex(6) + ":"
	t.Cleanup(func() {
		DeletePrefix(context.Background(), rdb, prefix)
		rdb.Close()
	})
	return rdb, prefix
}

// DeletePrefix deletes every key that starts with prefix.
func DeletePrefix(ctx context.Context, rdb redis.UniversalClient, prefix string) {
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			rdb.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		rdb.Unlink(ctx, batch...)
	}
}

// CountKeys counts the keys under prefix.
func CountKeys(ctx context.Context, rdb redis.UniversalClient, prefix string) int {
	n := 0
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		n++
	}
	return n
}
