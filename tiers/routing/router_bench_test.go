package routing

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/internal/testsupport/tierstest"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/cold"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/warm"
)

// BenchmarkRouter_ColdBatches: the router's cost per check when every cell
// is cold, with checks arriving the way quotad's coalescer hands them over
// (4 senders, batches of ops of two cells each, the default rules' shape):
// batches of 16 (a busy coalescer) and of 1 (a quiet one), with and without
// cold hints (without: every batch looks its cells' rows up first). ns/op
// is per check. Run with -benchtime=Nx, N a multiple of 64.
func BenchmarkRouter_ColdBatches(b *testing.B) {
	for _, batch := range []int{1, 16} {
		for _, hints := range []bool{false, true} {
			b.Run(fmt.Sprintf("ops=%d/hints=%v", batch, hints), func(b *testing.B) {
				benchRouterCold(b, batch, hints)
			})
		}
	}
}

func benchRouterCold(b *testing.B, batch int, hints bool) {
	ctx := context.Background()
	cold := cold.NewStore(testenv.MySQLShards(b, 2), cold.Options{})
	rdb := testenv.BenchRedis(b)
	r := NewRouter(hot.NewStore(rdb, hot.Options{Prefix: "h:"}), warm.NewStore(rdb, warm.Options{Prefix: "w:"}), cold)
	if hints {
		r.ColdHints = NewColdHints(1 << 16)
	}
	cells := tierstest.BenchCells(4096)
	now := time.Now()
	var recs []tiers.Record
	for _, c := range cells {
		for _, cc := range c {
			recs = append(recs, tiers.Record{Ref: cc.Ref(), First: now.Unix(), Last: now.Unix()})
		}
	}
	if err := cold.Import(ctx, recs); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.SetParallelism(2) // 4 senders on 2 CPUs, like QUOTA_COALESCE=4
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ops := make([]*tiers.Op, 0, batch)
		send := func() {
			if err := r.Check(ctx, now, ops); err != nil {
				b.Error(err)
			}
			for _, op := range ops {
				if !op.Committed || op.Out[0].Tier != tiers.Cold {
					b.Errorf("op not counted in cold: %+v", op.Out)
				}
			}
			ops = ops[:0]
		}
		for pb.Next() {
			c := cells[next.Add(1)%int64(len(cells))]
			ops = append(ops, confOp(now, 1, tiers.Enforce, c[0], c[1]))
			if len(ops) == batch {
				send()
			}
		}
		if len(ops) > 0 {
			send()
		}
	})
}
