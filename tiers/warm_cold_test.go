package tiers_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/cold"
	"github.com/quota-platform/quota/tiers/warm"
)

func TestWarmCold_RejectOtherAlgorithmsAndOldTimes(t *testing.T) {
	t.Parallel()
	s, _, _ := newWarm(t, warm.Options{})
	cold := cold.NewStore(nil, cold.Options{})
	c := newConfCell(10, time.Hour)
	for _, st := range []tiers.Store{s, cold} {
		op := confOp(confT0, 1, tiers.Enforce, c)
		op.Cells[0].Algorithm = rules.TokenBucket
		if err := st.Check(context.Background(), confT0, []*tiers.Op{op}); err == nil {
			t.Errorf("%s counted a token bucket", st.Tier())
		}
	}
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := s.Check(context.Background(), old, []*tiers.Op{confOp(old, 1, tiers.Enforce, c)}); err == nil {
		t.Error("warm counted at a time its record cannot hold")
	}
}

// newWarm is tier_warm_test.go's, for this external package.
func newWarm(t *testing.T, o warm.Options) (*warm.Store, *redis.Client, string) {
	rdb, prefix := testenv.Redis(t)
	o.Prefix = prefix
	return warm.NewStore(rdb, o), rdb, prefix
}
