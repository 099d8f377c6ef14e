package routing

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/cold"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/warm"
)

// BenchmarkQuietMove_RedisInstructions counts the instructions Redis
// executes a cell for the quiet move's two scripts: HotMover.States
// (hot_state.lua) and SwitchQuietToCold (cold_switch.lua), for cells with
// a count and idle ones (held by States), 2,000 cells of 160 apps in calls
// of 1,000 as the cycle's batches, on a redis-server of its own run under
// callgrind (make bench-scripts; skipped without valgrind). Unlike CPU
// time, the figures do not move with the load of a shared machine.
func BenchmarkQuietMove_RedisInstructions(b *testing.B) {
	cg, r := callgrindRouter(b)
	m := &hot.Mover{Hot: r.Hot(), Warm: r.warm, Now: func() time.Time { return confT0 }}
	capacity := func(tiers.Tag) int { return 200 }
	quietMove(b, r, m, capacity, 1, true, nil) // the scripts loaded, outside the count
	for _, tc := range []struct {
		name    string
		counted bool
	}{{"counted", true}, {"idle", false}} {
		b.Run(tc.name, func(b *testing.B) {
			const cells = 2000
			var states, switches int64
			for range b.N {
				s, w := quietMove(b, r, m, capacity, cells, tc.counted, cg)
				states, switches = states+s, switches+w
			}
			b.ReportMetric(float64(states)/float64(b.N*cells), "states-instr/cell")
			b.ReportMetric(float64(switches)/float64(b.N*cells), "switch-instr/cell")
			b.ReportMetric(float64(states+switches)/float64(b.N*cells), "redis-instr/cell")
		})
	}
}

// callgrindRouter is a router on a redis-server run under callgrind
// (testenv.StartRedisCallgrind) and two MySQL shards.
func callgrindRouter(b *testing.B) (*testenv.Callgrind, *Router) {
	b.Helper()
	cg := testenv.StartRedisCallgrind(b)
	rdb := redis.NewClient(&redis.Options{Addr: cg.Addr()})
	b.Cleanup(func() { rdb.Close() })
	return cg, NewRouter(hot.NewStore(rdb, hot.Options{Prefix: "bench:"}), warm.NewStore(rdb, warm.Options{Prefix: "bench:"}),
		cold.NewStore(testenv.MySQLShards(b, 2), cold.Options{}))
}

// quietMove makes n new hot cells of 1-day windows over 160 apps (each
// counted once if counted, else idle) and moves them to cold by the quiet
// move's scripts in calls of 1,000, requiring every cell to switch. With
// cg (nil: none) it returns the instructions Redis executed for the States
// and the switch calls.
func quietMove(b *testing.B, r *Router, m *hot.Mover, capacity func(tiers.Tag) int, n int, counted bool, cg *testenv.Callgrind) (states, switches int64) {
	b.Helper()
	ctx := context.Background()
	apps := make([]confCell, 160)
	for i := range apps {
		apps[i] = newConfCell(10, 24*time.Hour)
	}
	refs := make([]tiers.Ref, n)
	var ops []*tiers.Op
	for i := range refs {
		c := newConfCell(10, 24*time.Hour)
		c.App, c.Vals[0] = apps[i%len(apps)].App, apps[i%len(apps)].App
		refs[i] = c.Ref()
		if counted {
			ops = append(ops, confOp(confT0, 1, tiers.Enforce, c))
		}
	}
	if err := r.Check(ctx, confT0, ops); err != nil {
		b.Fatal(err)
	}
	measure := func(fn func()) int64 {
		if cg == nil {
			fn()
			return 0
		}
		return cg.Instructions(fn)
	}
	for batch := range slices.Chunk(refs, 1000) {
		var st []hot.State
		var ok []bool
		var err error
		states += measure(func() { st, err = m.States(ctx, batch, slices.Repeat([]bool{!counted}, len(batch))) })
		if err != nil {
			b.Fatal(err)
		}
		switches += measure(func() { ok, err = m.SwitchQuietToCold(ctx, batch, st, capacity) })
		if err != nil || slices.Contains(ok, false) {
			b.Fatalf("switch: %v %v", ok, err)
		}
	}
	return states, switches
}

// BenchmarkCheck_RedisInstructions counts the instructions Redis executes
// a check of one fixed-window cell (hot_fixed.lua), one check a call as a
// gateway sends them: a cell's first call in a tag with cold cells (the
// script probes the tag's cold filter: 40 cells in one layer) and its next
// call (its counter exists), on a redis-server run under callgrind (make
// bench-scripts; skipped without valgrind).
func BenchmarkCheck_RedisInstructions(b *testing.B) {
	cg, r := callgrindRouter(b)
	ctx := context.Background()
	apps := make([]confCell, 50)
	var swaps []warm.DirSwap
	for i := range apps {
		apps[i] = newConfCell(10, time.Hour)
		for range 40 {
			c := newConfCell(10, time.Hour)
			c.App, c.Vals[0] = apps[i].App, apps[i].App
			swaps = append(swaps, warm.DirSwap{Ref: c.Ref()})
		}
	}
	if _, err := r.warm.SwitchToCold(ctx, swaps, nil); err != nil { // field absent: into the filters
		b.Fatal(err)
	}
	check := func(ops []*tiers.Op) {
		for _, op := range ops {
			if err := r.Check(ctx, confT0, []*tiers.Op{op}); err != nil || !op.Committed {
				b.Fatalf("check: %v, committed %v", err, op.Committed)
			}
		}
	}
	check([]*tiers.Op{confOp(confT0, 1, tiers.Enforce, newConfCell(10, time.Hour))}) // the script loaded
	const cells = 1000
	var first, next int64
	for range b.N {
		var ops, again []*tiers.Op
		for i := range cells {
			c := newConfCell(10, time.Hour)
			c.App, c.Vals[0] = apps[i%len(apps)].App, apps[i%len(apps)].App
			ops = append(ops, confOp(confT0, 1, tiers.Enforce, c))
			again = append(again, confOp(confT0, 1, tiers.Enforce, c))
		}
		first += cg.Instructions(func() { check(ops) })
		next += cg.Instructions(func() { check(again) })
	}
	b.ReportMetric(float64(first)/float64(b.N*cells), "first-call-instr/check")
	b.ReportMetric(float64(next)/float64(b.N*cells), "next-call-instr/check")
}

// BenchmarkNewCell_RedisInstructions counts the instructions Redis
// executes a new cell of a check in tags with only hot cells (no header),
// as make bench-cells fills them: ops of one fixed-window cell over 97
// apps, 500 an r.Check (POST /v1/check/batch's pipeline), through the hot
// store alone (tiering off) and through the router (on: the script reads
// the tag's header too), on a redis-server run under callgrind (make
// bench-scripts; skipped without valgrind).
func BenchmarkNewCell_RedisInstructions(b *testing.B) {
	apps := make([]confCell, 97)
	for i := range apps {
		apps[i] = newConfCell(10, 30*24*time.Hour)
	}
	offAndOnInstructions(b, 1000, 500, func(i int) *tiers.Op {
		c := newConfCell(10, 30*24*time.Hour)
		c.App, c.Vals[0] = apps[i%len(apps)].App, apps[i%len(apps)].App
		return confOp(confT0, 1, tiers.Enforce, c)
	})
}

// BenchmarkPlatformChecks_RedisInstructions counts the instructions Redis
// executes a check of the platform's two quotas (an app's IP and its
// user's interface: two fixed-window cells of one app, both new, as most
// of make bench-peers' ordinary checks are), 16 checks an r.Check as the
// coalescer sends concurrent checks, through the hot store alone (tiering
// off) and through the router (on), on a redis-server run under callgrind
// (make bench-scripts; skipped without valgrind). The checks share
// hot_fixed.lua's calls (hot.fixedPerCall).
func BenchmarkPlatformChecks_RedisInstructions(b *testing.B) {
	offAndOnInstructions(b, 2000, 16, func(int) *tiers.Op {
		ip, user := newConfCell(10000, time.Hour), newConfCell(1000, time.Hour)
		user.App, user.Vals[0] = ip.App, ip.App
		ip.Rule, user.Rule = "app_ip_hourly", "app_user_iface_hourly"
		return confOp(confT0, 1, tiers.Enforce, ip, user)
	})
}

// offAndOnInstructions reports, as redis-instr/check, the instructions a
// redis-server run under callgrind executes for checks new ops (op(i) is
// the i-th of a batch), per ops a Check, through the hot store alone
// (tiering off) and through a router (on), failing b unless every op is
// counted.
func offAndOnInstructions(b *testing.B, checks, per int, op func(i int) *tiers.Op) {
	cg := testenv.StartRedisCallgrind(b)
	rdb := redis.NewClient(&redis.Options{Addr: cg.Addr()})
	b.Cleanup(func() { rdb.Close() })
	// Redis' cron (active expiry, table resizing) runs 10 times a second
	// and counts too: once a second, it weighs ~1 % under a loaded machine.
	if err := rdb.ConfigSet(context.Background(), "hz", "1").Err(); err != nil {
		b.Fatal(err)
	}
	off := hot.NewStore(rdb, hot.Options{Prefix: "off:"})
	on := NewRouter(hot.NewStore(rdb, hot.Options{Prefix: "on:"}), warm.NewStore(rdb, warm.Options{Prefix: "on:"}),
		cold.NewStore(testenv.MySQLShards(b, 2), cold.Options{}))
	ctx := context.Background()
	batch := func() []*tiers.Op {
		ops := make([]*tiers.Op, per)
		for i := range ops {
			ops[i] = op(i)
		}
		return ops
	}
	for _, tc := range []struct {
		name  string
		check func(context.Context, time.Time, []*tiers.Op) error
	}{{"off", off.Check}, {"on", on.Check}} {
		b.Run(tc.name, func(b *testing.B) {
			run := func(ops []*tiers.Op) {
				if err := tc.check(ctx, confT0, ops); err != nil {
					b.Fatal(err)
				}
				for _, op := range ops {
					if !op.Committed {
						b.Fatal("a new check was not counted")
					}
				}
			}
			run(batch()) // the script loaded
			var instr int64
			for range b.N {
				batches := make([][]*tiers.Op, checks/per)
				for i := range batches {
					batches[i] = batch()
				}
				instr += cg.Instructions(func() {
					for _, ops := range batches {
						run(ops)
					}
				})
			}
			b.ReportMetric(float64(instr)/float64(b.N*checks), "redis-instr/check")
		})
	}
}
