package migrate

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quota-platform/quota/internal/testsupport/moveenv"
	"github.com/quota-platform/quota/tiers"
)

// statsWithACellIn counts e's tiers once a cell has been checked in hot
// and another checked and moved to tier.
func statsWithACellIn(t *testing.T, e *env, tier tiers.Tier) TierStats {
	t.Helper()
	hot, moved := moveenv.NewCell(10), moveenv.NewCell(10)
	e.Check(t, tiers.Enforce, hot)
	e.Check(t, tiers.Enforce, moved)
	e.Move(t, tiers.Hot, tier, moved)
	st, err := e.mover.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A count of the tiers sets the tier-size gauges a dashboard reads: cells
// checked, then moved, appear in their tier's gauge at the next count.
func TestStats_CountSetsTheTierGauges(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	e.mover.Metrics = NewMetrics(reg)
	st := statsWithACellIn(t, e, tiers.Warm)
	for tier, want := range map[string]int64{"hot": st.Hot.Identities, "warm": st.Warm.Identities, "cold": st.Cold.Identities} {
		if got := testutil.ToFloat64(e.mover.Metrics.tierCells.WithLabelValues(tier)); got != float64(want) {
			t.Errorf("quota_tier_cells{tier=%q} = %v, want %d (the count's)", tier, got, want)
		}
	}
	if st.Hot.Identities < 1 || st.Warm.Identities < 1 {
		t.Errorf("count %+v: want the hot and the warm cell", st)
	}
	if testutil.ToFloat64(e.mover.Metrics.tierCounted) == 0 {
		t.Error("quota_tier_counted_timestamp_seconds not set")
	}
}

// A count tells a cold cell's bytes in Redis (its tag's cold filter) from
// those in MySQL (cold_cells); the tier's bytes are their sum.
func TestStats_ColdBytesAreTheFiltersInRedisAndTheRowsInMySQL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	st := statsWithACellIn(t, e, tiers.Cold)
	c := st.Cold
	if c.Identities < 1 || c.RedisBytes <= 0 || c.MySQLBytes <= 0 || c.Bytes != c.RedisBytes+c.MySQLBytes {
		t.Errorf("cold %+v: want the filter's Redis bytes and the table's MySQL bytes, summed", c)
	}
	if h := st.Hot; h.RedisBytes != h.Bytes || h.MySQLBytes != 0 {
		t.Errorf("hot %+v: want all its bytes in Redis", h)
	}
}
