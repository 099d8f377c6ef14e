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
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var sum float64
	for _, l := range strings.Split(info, "\r\n") {
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
