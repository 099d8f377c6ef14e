package throttled

import (
	"context"
	"testing"
	"time"

	"github.com/quota-platform/quota/analytics/usage"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// A who-is-throttled flush whose COMMIT answer was lost is resolved by its
// batch id: a batch that did commit is not written again, one that did not
// is, so no denial counts twice or goes missing.
func TestThrottledUncertainCommitResolvedByBatchID(t *testing.T) {
	t.Parallel()
	db := testenv.MySQLShards(t, 1)[0]
	clk := clock.NewFake(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	th := New(clk, usage.Days{}, usage.Shards{db}, Options{}, nil)
	ctx := context.Background()
	day := usage.DayOf(clk.Now())
	deny := func(n int) {
		for range n {
			th.Denied("app", "r", []string{"app_id", "user_id"}, []string{"app", "u"})
		}
	}
	deny(5)
	committed := th.takeDeltas(day)
	if _, err := th.write(ctx, db, [16]byte{1}, committed); err != nil {
		t.Fatal(err)
	}
	deny(3)
	lost := th.takeDeltas(day) // taken, never written
	th.uncertain = []throttledBatch{{0, [16]byte{1}, committed}, {0, [16]byte{2}, lost}}
	deny(2)
	if err := th.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := th.Top(ctx, "app", day, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Top) != 1 || got[0].Top[0].Denied != 10 || len(th.uncertain) != 0 {
		t.Fatalf("%+v (uncertain %d), want 5 committed + 3 written again + 2 = 10 denials", got, len(th.uncertain))
	}
	var n int64
	if err := db.QueryRow("SELECT denied FROM throttled_identities WHERE app_id = 'app'").Scan(&n); err != nil || n != 10 {
		t.Fatalf("MySQL has %d (%v), want 10", n, err)
	}
}
