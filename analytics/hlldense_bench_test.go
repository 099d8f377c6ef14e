package analytics

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testsupport/benchload"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// BenchmarkPFADD is what a user added to a distinct-user HyperLogLog costs
// Redis, sparse (as Redis leaves a key up to 3,000 bytes) and made dense
// before the first add (what convertDense does): keys × rounds PFADDs of
// per new users each, pipelined 500 commands a round trip. It reports
// Redis' own µs per user (INFO commandstats, server-wide: run it on an
// otherwise idle Redis) beside the client's ns per user.
//
//	go test -run '^$' -bench BenchmarkPFADD -benchtime 1x ./analytics/
func BenchmarkPFADD(b *testing.B) {
	shapes := []struct {
		name              string
		keys, per, rounds int
	}{
		{"busy keys: 1000 keys, 90 users a PFADD, 12 rounds", 1000, 90, 12},
		{"small keys: 20000 keys, 7 users a PFADD, 12 rounds", 20000, 7, 12},
	}
	for _, s := range shapes {
		for _, dense := range []bool{false, true} {
			name := s.name + ", sparse"
			if dense {
				name = s.name + ", dense"
			}
			b.Run(name, func(b *testing.B) {
				rdb, prefix := testenv.Redis(b)
				ctx := context.Background()
				var users, redisUsec int64
				for b.Loop() {
					b.StopTimer()
					testenv.DeletePrefix(ctx, rdb, prefix)
					keys := make([]*touchedHLL, s.keys)
					for i := range keys {
						keys[i] = &touchedHLL{name: prefix + "hll:{" + strconv.Itoa(i) + "}:a"}
					}
					if dense {
						makeDense(ctx, b, rdb, keys)
					}
					before := pfaddUsec(ctx, b, rdb)
					b.StartTimer()
					x := benchload.NewXorshift()
					pipe := rdb.Pipeline()
					for range s.rounds {
						for _, k := range keys {
							args := make([]any, s.per)
							for j := range args {
								args[j] = "user-" + strconv.FormatUint(x.Next()%10_000_000, 10)
							}
							pipe.PFAdd(ctx, k.name, args...)
							users += int64(s.per)
							if pipe.Len() == pipelineChunk {
								if _, err := pipe.Exec(ctx); err != nil {
									b.Fatal(err)
								}
							}
						}
					}
					if _, err := pipe.Exec(ctx); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					redisUsec += pfaddUsec(ctx, b, rdb) - before
					b.StartTimer()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(users), "ns/user")
				b.ReportMetric(float64(redisUsec)/float64(users), "redis-µs/user")
			})
		}
	}
}

// pfaddUsec is Redis' total µs in PFADD so far (INFO commandstats).
func pfaddUsec(ctx context.Context, b *testing.B, rdb *redis.Client) int64 {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_pfadd:")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
	}
	return 0
}

// BenchmarkPackedRegisters reports the bytes usage_uniques stores for a
// HyperLogLog of n users ("user-0"…): as Redis keeps it sparse, and made
// dense (convertDense) then packed (packRegisters). Sizes, not speed.
//
//	go test -run '^$' -bench BenchmarkPackedRegisters -benchtime 1x ./analytics/
func BenchmarkPackedRegisters(b *testing.B) {
	for _, n := range []int{500, 1000, 1500, 2000, 20_000, 100_000} {
		b.Run(strconv.Itoa(n)+" users", func(b *testing.B) {
			rdb, prefix := testenv.Redis(b)
			ctx := context.Background()
			t := &touchedHLL{name: prefix + "hll:{p}:a"}
			var sparse, packed int
			for b.Loop() {
				testenv.DeletePrefix(ctx, rdb, prefix)
				pipe := rdb.Pipeline()
				for lo := 0; lo < n; lo += pfaddChunk {
					args := make([]any, 0, pfaddChunk)
					for u := lo; u < min(n, lo+pfaddChunk); u++ {
						args = append(args, "user-"+strconv.Itoa(u))
					}
					pipe.PFAdd(ctx, t.name, args...)
				}
				if _, err := pipe.Exec(ctx); err != nil {
					b.Fatal(err)
				}
				sparse = int(rdb.StrLen(ctx, t.name).Val())
				makeDense(ctx, b, rdb, []*touchedHLL{t})
				v, err := rdb.Get(ctx, t.name).Bytes()
				if err != nil {
					b.Fatal(err)
				}
				packed = len(packRegisters(v))
			}
			b.ReportMetric(float64(sparse), "redis-bytes")
			b.ReportMetric(float64(packed), "dense-packed-bytes")
		})
	}
}

// makeDense makes keys dense HyperLogLogs by merging an empty dense one
// into each (PFMERGE makes its destination dense when a source is).
func makeDense(ctx context.Context, b *testing.B, rdb redis.UniversalClient, keys []*touchedHLL) {
	empty := make([]byte, hllDenseSize)
	copy(empty, hllMagic) // then encoding 0 (dense), a cached count of 0, no register set
	pipe := rdb.Pipeline()
	for _, t := range keys {
		mergeRegisters(ctx, pipe, t.name, empty)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
}
