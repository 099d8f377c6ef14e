package testenv

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCPU is the CPU time (user and system) the Redis server behind rdb
// has used, from INFO cpu: benchmarks take the difference around the work
// they measure, on a server of their own so that no other client's work is
// in it.
func RedisCPU(tb testing.TB, rdb redis.UniversalClient) time.Duration {
	tb.Helper()
	var sum float64
	for _, l := range redisInfo(tb, rdb, "cpu") {
		for _, f := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(l, f); ok {
				s, err := strconv.ParseFloat(v, 64)
				if err != nil {
					tb.Fatalf("INFO cpu %q: %v", l, err)
				}
				sum += s
			}
		}
	}
	return time.Duration(sum * float64(time.Second))
}

// RedisCommands is how many commands the Redis server behind rdb has run
// since its stats were last reset, from INFO commandstats, the commands
// scripts call included: a count of the work a benchmark gives Redis that
// does not vary with the machine's speed, as its CPU time does.
func RedisCommands(tb testing.TB, rdb redis.UniversalClient) int64 {
	tb.Helper()
	var sum int64
	for _, l := range redisInfo(tb, rdb, "commandstats") {
		_, stats, ok := strings.Cut(l, ":calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(stats, ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			tb.Fatalf("INFO commandstats %q: %v", l, err)
		}
		sum += n
	}
	return sum
}

// redisInfo is the lines of one section of INFO from the server behind rdb.
func redisInfo(tb testing.TB, rdb redis.UniversalClient, section string) []string {
	tb.Helper()
	info, err := rdb.Info(context.Background(), section).Result()
	if err != nil {
		tb.Fatal(err)
	}
	return strings.Split(info, "\r\n")
}
