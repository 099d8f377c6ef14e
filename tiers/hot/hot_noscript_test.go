package hot

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
)

// A batch whose pipeline finds one of its scripts missing on only some
// calls (a restarted or newly promoted master lacks what the others have)
// sends again just the refused calls: the calls that ran must not count
// twice. Two ops, one fixed window (hot_fixed.lua, loaded) and one sliding
// window (the general script, flushed), limit 2, one unit each, twice:
// every one of the four is allowed.
func TestHot_ScriptMissingForSomeCallsCountsEachCallOnce(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t) // its own server: the test flushes its scripts
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	hot := NewStore(rdb, Options{Prefix: "n:"})
	ctx := context.Background()
	fixed, sliding := newConfCell(2, time.Hour), newConfCell(2, time.Hour)
	for round := 1; round <= 2; round++ {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := hot.fixed.Load(ctx, rdb).Err(); err != nil {
			t.Fatal(err)
		}
		a, b := confOp(confT0, 1, tiers.Enforce, fixed), confOp(confT0, 1, tiers.Enforce, sliding)
		b.Cells[0].Algorithm = rules.SlidingWindow
		b.Cells[0].Key = tiers.CounterKeyOf(sliding.Rule, sliding.Vals, 3600, 0)
		if err := hot.Check(ctx, confT0, []*tiers.Op{a, b}); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for _, op := range []*tiers.Op{a, b} {
			if want := int64(2 - round); !op.Committed || op.Out[0].Remaining != want {
				t.Errorf("round %d, %s: committed %v, remaining %d; want counted once (%d left)",
					round, op.Cells[0].Algorithm, op.Committed, op.Out[0].Remaining, want)
			}
		}
	}
}
