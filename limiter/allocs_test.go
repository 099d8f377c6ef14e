//go:build !race

package limiter_test

import (
	"context"
	"testing"

	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/rules"
)

// A check's op and cells are built in a buffer used again once the answer
// is copied out: a denial answered from the cache allocates its answer
// alone, and a batch's allocations grow by one answer a check.
func TestCheck_OpBuffersAreUsedAgain(t *testing.T) {
	rig := newDenialRig(t, []rules.Rule{
		{Name: "per_user", Dimensions: []string{"user_id"}, Limit: 1, Window: rules.Duration(3600e9), Algorithm: rules.FixedWindow},
	}, 1000)
	ctx := context.Background()
	req := &limiter.Request{Cost: 1, Dims: dims("user_id", "u1")}
	for i, want := range []bool{true, false} {
		d, err := rig.cached.Check(ctx, req)
		if err != nil || d.Allowed != want {
			t.Fatalf("call %d: allowed %v (%v), want %v", i+1, d.Allowed, err, want)
		}
	}
	if got := rig.denials.Hits(); got != 0 {
		t.Fatalf("%d cache hits before the measured calls, want 0", got)
	}
	if n := testing.AllocsPerRun(100, func() {
		if d, err := rig.cached.Check(ctx, req); err != nil || d.Allowed {
			t.Fatalf("allowed %v (%v), want a denial", d.Allowed, err)
		}
	}); n != 1 {
		t.Errorf("a cached denial: %v allocations, want 1 (its answer's entries)", n)
	}
	if rig.denials.Hits() == 0 {
		t.Fatal("the measured calls were not answered from the cache")
	}
	batch := func(n int) float64 {
		reqs := make([]*limiter.Request, n)
		for i := range reqs {
			reqs[i] = req
		}
		return testing.AllocsPerRun(50, func() {
			rig.cached.CheckBatchEach(ctx, reqs, func(i int, d limiter.Decision, err error) {
				if err != nil || d.Allowed {
					t.Fatalf("check %d: allowed %v (%v), want a denial", i, d.Allowed, err)
				}
			})
		})
	}
	eight, sixteen := batch(8), batch(16)
	if sixteen-eight != 8 {
		t.Errorf("a batch of 16 cached denials: %v allocations, of 8: %v; want 8 more (one answer a check)", sixteen, eight)
	}
}
