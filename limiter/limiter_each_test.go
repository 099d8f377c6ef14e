package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers/hot"
)

func TestCheckBatchEach_DeliversEveryRequestOnceWithItsOwnDecision(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	set, err := rules.NewSet([]rules.Rule{{
		Name: "per_user", Dimensions: []string{"user_id"}, Limit: 1,
		Window: rules.Duration(time.Hour), Algorithm: rules.FixedWindow,
	}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limiter.New(hot.NewStore(rdb, hot.Options{Prefix: prefix}), clock.Real{}, set)
	if err != nil {
		t.Fatal(err)
	}
	user := func(u string) *limiter.Request {
		return &limiter.Request{Cost: 1, Dims: []limiter.Dim{{Name: "user_id", Value: u}}}
	}
	// The second request matches no rule (no cells): allowed, no entries.
	reqs := []*limiter.Request{user("a"), {Cost: 1}, user("a"), user("b")}
	want := []struct {
		allowed bool
		entries int
	}{{true, 1}, {true, 0}, {false, 1}, {true, 1}}
	got := make([]int, len(reqs))
	lim.CheckBatchEach(context.Background(), reqs, func(i int, d limiter.Decision, err error) {
		got[i]++
		if err != nil || d.Allowed != want[i].allowed || len(d.Entries) != want[i].entries {
			t.Errorf("request %d: %+v %v, want allowed %v with %d entries", i, d, err, want[i].allowed, want[i].entries)
		}
	})
	for i, n := range got {
		if n != 1 {
			t.Errorf("request %d delivered %d times", i, n)
		}
	}
	// CheckBatch answers the same (a and b now at their limit).
	ds, err := lim.CheckBatch(context.Background(), []*limiter.Request{user("b"), {Cost: 1}, user("c")})
	if err != nil || ds[0].Allowed || !ds[1].Allowed || !ds[2].Allowed {
		t.Fatalf("CheckBatch: %+v %v", ds, err)
	}
}
