package tiers_test

import (
	"context"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/internal/testsupport/tierstest"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/cold"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/warm"
)

// Per-tier cost of one check shaped like the default rules: two cells, one
// (app, ip) and one (app, user, interface), both hourly, always allowed
// (the counting path: for warm a read and a compare-and-set, for cold a
// transaction per shard touched). Run with -benchmem.

func tierBenchStore(b *testing.B, s tiers.Store) {
	ctx := context.Background()
	cells := tierstest.BenchCells(4096)
	now := time.Now()
	i := 0
	for b.Loop() {
		c := cells[i%len(cells)]
		i++
		op := confOp(now, 1, tiers.Enforce, c[0], c[1])
		if err := s.Check(ctx, now, []*tiers.Op{op}); err != nil {
			b.Fatal(err)
		}
		if !op.Committed {
			b.Fatal("denied")
		}
	}
}

func BenchmarkStore_Hot(b *testing.B) {
	tierBenchStore(b, hot.NewStore(testenv.BenchRedis(b), hot.Options{Prefix: "h:"}))
}

func BenchmarkStore_Warm(b *testing.B) {
	tierBenchStore(b, warm.NewStore(testenv.BenchRedis(b), warm.Options{Prefix: "w:"}))
}

func BenchmarkStore_Cold(b *testing.B) {
	tierBenchStore(b, cold.NewStore(testenv.MySQLShards(b, 2), cold.Options{}))
}
