package hot

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
)

// The benchmarks check like the default rules do (8 × GOMAXPROCS clients): every op has two cells,
// app_ip_hourly (10,000 an hour) and app_user_iface_hourly (1,000 an hour),
// here both of the algorithm under test, on the real Redis.
//
//	spread: 100,000 apps×IPs and users, real time: nearly every call is
//	        allowed and every identity holds little state (the common case);
//	hot:    8 apps×IPs and 80 users, simulated time running so that each
//	        identity is called at its limit's rate (one call per 360 ms of an
//	        app×IP, per 3.6 s of a user): states grow to their steady size
//	        for an hourly limit (sliding_window: ~3,600 second buckets,
//	        sliding_log: a full ring) and calls near the limit are denied.

type benchIdentity struct {
	app, ip, user string
}

func benchCells(a rules.Algorithm, id benchIdentity, now time.Time) []tiers.Cell {
	mk := func(rule string, limit int64, vals ...string) tiers.Cell {
		var index int64
		if a == rules.FixedWindow {
			index = now.UnixMilli() / time.Hour.Milliseconds()
		}
		return tiers.Cell{
			Algorithm: a, Limit: limit, Window: time.Hour,
			Identity: tiers.IdentityOf(rule, vals),
			Key:      tiers.CounterKeyOf(rule, vals, 3600, index),
			Tag:      tiers.TagOf(id.app),
		}
	}
	return []tiers.Cell{
		mk("app_ip_hourly", 10_000, id.app, id.ip),
		mk("app_user_iface_hourly", 1_000, id.app, id.user, "users.get"),
	}
}

func benchHotCheck(b *testing.B, a rules.Algorithm) {
	b.Run("spread", func(b *testing.B) {
		rdb, prefix := testenv.Redis(b)
		s := NewStore(rdb, Options{Prefix: prefix, Jitter: time.Minute})
		ctx := context.Background()
		if err := s.Load(ctx); err != nil {
			b.Fatal(err)
		}
		var seed atomic.Uint64
		var denied atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(8) // 8 × GOMAXPROCS clients, like a busy server
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			rng := rand.New(rand.NewPCG(seed.Add(1), 1))
			for pb.Next() {
				n := rng.IntN(100_000)
				id := benchIdentity{app: "app" + strconv.Itoa(n%1000), ip: "10.0." + strconv.Itoa(n), user: "u" + strconv.Itoa(n)}
				now := time.Now()
				op := &tiers.Op{Cost: 1, Mode: tiers.Enforce, Cells: benchCells(a, id, now)}
				if err := s.Check(ctx, now, []*tiers.Op{op}); err != nil {
					b.Error(err)
					return
				}
				if !op.Committed {
					denied.Add(1)
				}
			}
		})
		b.ReportMetric(float64(denied.Load())/float64(b.N), "denied/op")
	})
	b.Run("hot", func(b *testing.B) {
		rdb, prefix := testenv.Redis(b)
		s := NewStore(rdb, Options{Prefix: prefix, Jitter: time.Minute})
		ctx := context.Background()
		if err := s.Load(ctx); err != nil {
			b.Fatal(err)
		}
		start := time.Now().UnixMilli()
		var tick, denied atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(8) // 8 × GOMAXPROCS clients, like a busy server
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := tick.Add(1)
				id := benchIdentity{app: "app" + strconv.Itoa(int(i%8)), ip: "10.0.0." + strconv.Itoa(int(i%8)), user: "u" + strconv.Itoa(int(i%80))}
				now := time.UnixMilli(start + i*45) // 8 apps×IPs: each every 360 ms
				op := &tiers.Op{Cost: 1, Mode: tiers.Enforce, Cells: benchCells(a, id, now)}
				if err := s.Check(ctx, now, []*tiers.Op{op}); err != nil {
					b.Error(err)
					return
				}
				if !op.Committed {
					denied.Add(1)
				}
			}
		})
		b.ReportMetric(float64(denied.Load())/float64(b.N), "denied/op")
	})
}

func BenchmarkHotCheck_FixedWindow(b *testing.B)   { benchHotCheck(b, rules.FixedWindow) }
func BenchmarkHotCheck_SlidingWindow(b *testing.B) { benchHotCheck(b, rules.SlidingWindow) }
func BenchmarkHotCheck_TokenBucket(b *testing.B)   { benchHotCheck(b, rules.TokenBucket) }
func BenchmarkHotCheck_SlidingLog(b *testing.B)    { benchHotCheck(b, rules.SlidingLog) }
func BenchmarkHotCheck_MinInterval(b *testing.B)   { benchHotCheck(b, rules.MinInterval) }

// BenchmarkAlgoMemory_PerIdentity measures MEMORY USAGE of one identity's
// key per algorithm and limit: after one call (B-one-call), and after a
// window of calls at the limit's rate (B-full-window; fields-full-window
// for sliding_window's hash). Each iteration is a fresh identity; the
// figures do not depend on b.N, so `make bench-algo-memory` runs it once
// (-benchtime 1x; numbers for BENCHMARKS.md).
func BenchmarkAlgoMemory_PerIdentity(b *testing.B) {
	rdb, prefix := testenv.Redis(b)
	s := NewStore(rdb, Options{Prefix: prefix, Jitter: time.Minute})
	ctx := context.Background()
	type setup struct {
		limit  int64
		window time.Duration
	}
	for _, a := range diffAlgos {
		for _, st := range []setup{{10, time.Hour}, {1000, time.Hour}, {10_000, time.Hour}, {10, 24 * time.Hour}, {1000, 24 * time.Hour}} {
			if a == rules.MinInterval && st.limit > 1000 {
				continue
			}
			b.Run(fmt.Sprintf("%s/%d_per_%s", a, st.limit, st.window), func(b *testing.B) {
				var one, full, fields int64
				for i := 0; i < b.N; i++ {
					c := algoCell(a, st.limit, st.window, fmt.Sprintf("mem %s %d/%s #%d", a, st.limit, st.window, i))
					usage := func() int64 {
						n, err := rdb.MemoryUsage(ctx, s.Key(&c), 0).Result()
						if err != nil {
							b.Fatal(err)
						}
						return n
					}
					now := t0 + 1234
					if err := s.Check(ctx, time.UnixMilli(now), []*tiers.Op{{Cost: 1, Cells: []tiers.Cell{c}}}); err != nil {
						b.Fatal(err)
					}
					one = usage()
					// then calls at the limit's rate for one window
					gap := st.window.Milliseconds() / st.limit
					for i := int64(1); i < st.limit; i++ {
						now += gap
						if err := s.Check(ctx, time.UnixMilli(now), []*tiers.Op{{Cost: 1, Cells: []tiers.Cell{c}}}); err != nil {
							b.Fatal(err)
						}
					}
					full = usage()
					if a == rules.SlidingWindow {
						n, err := rdb.HLen(ctx, s.Key(&c)).Result()
						if err != nil {
							b.Fatal(err)
						}
						fields = n
					}
				}
				b.ReportMetric(float64(one), "B-one-call")
				b.ReportMetric(float64(full), "B-full-window")
				if a == rules.SlidingWindow {
					b.ReportMetric(float64(fields), "fields-full-window")
				}
			})
		}
	}
}
