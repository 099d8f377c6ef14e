package routing

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/quota-platform/quota/tiers"
)

// The router calls the batch's WithSlowPart function once, after every op
// the hot script decided alone is reported and before any warm or cold
// part starts; a batch with nothing outside hot never calls it.
func TestRouter_CallsSlowPartOnceOnlyWhenWarmOrColdWorkIsLeft(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cold  []bool // per op: a cold cell (else a hot one)
		calls int
	}{
		{"all hot", []bool{false, false, false}, 0},
		{"one cold among hot", []bool{false, true, false}, 1},
		{"all cold", []bool{true, true}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, _ := newGroupRouter(t)
			var ops []*tiers.Op
			for _, isCold := range tc.cold {
				c := newConfCell(10, time.Hour)
				if isCold {
					makeCold(t, r, c)
				} else {
					routerCheck(t, r, confOp(confT0, 1, tiers.DryRun, c)) // places it hot
				}
				ops = append(ops, confOp(confT0, 1, tiers.Enforce, c))
			}
			var reported []int
			var atSlow [][]int // what was reported when slow was called
			ctx := tiers.WithSlowPart(context.Background(), func() { atSlow = append(atSlow, slices.Clone(reported)) })
			err := r.CheckEach(ctx, confT0, ops, func(i int, err error) {
				if err != nil {
					t.Errorf("op %d: %v", i, err)
				}
				reported = append(reported, i)
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(atSlow) != tc.calls {
				t.Fatalf("slow part called %d times, want %d", len(atSlow), tc.calls)
			}
			if tc.calls == 0 {
				return
			}
			var hot []int
			for i, isCold := range tc.cold {
				if !isCold {
					hot = append(hot, i)
				}
			}
			if !slices.Equal(atSlow[0], hot) {
				t.Fatalf("reported when the slow part began: %v, want the hot ops %v and nothing else", atSlow[0], hot)
			}
		})
	}
}
