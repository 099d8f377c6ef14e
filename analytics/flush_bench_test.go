package analytics_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/quota-platform/quota/analytics"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testenv"
)

// BenchmarkRecordAndFlush is what analytics costs per call end to end in
// quotad's process: Record of calls spread like `make bench`'s uniform keys
// (1,000 apps × 100,000 users × 50 interfaces, so nearly every call is a new
// per-user row), and a Flush to real MariaDB shards and Redis every
// flushEvery calls (a 15 s flush at ~13,000 checks/s). ns/op, B/op and
// allocs/op are per recorded call, flush included.
func BenchmarkRecordAndFlush(b *testing.B) {
	const flushEvery = 200_000
	dbs := testenv.MySQLShards(b, 2)
	rdb, prefix := testenv.Redis(b)
	clk := clock.NewFake(t0)
	rec, err := analytics.New(analytics.Options{DBs: dbs, Redis: rdb, KeyPrefix: prefix, Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	apps := names("app-", 1000)
	users := names("user-", 100_000)
	ifaces := names("iface.", 50)
	ctx := context.Background()
	var x uint64 = 88172645463325252
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		// xorshift: cheap, and the same sequence every run.
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		rec.Record(apps[x%1000], ifaces[(x>>10)%50], users[(x>>20)%100_000], true)
		if (i+1)%flushEvery == 0 {
			clk.Advance(15 * time.Second)
			if err := rec.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := rec.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}
