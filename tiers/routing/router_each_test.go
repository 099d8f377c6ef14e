package routing

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/internal/testsupport/tierstest"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/hot"
)

// Router.CheckEach answers each op of a batch as soon as it is decided.

type report struct {
	i   int
	err error
}

// checkEachAsync runs CheckEach(s, ops) in the background and returns its
// reports as they come; the channel is closed when CheckEach returns.
func checkEachAsync(s tiers.Store, ops ...*tiers.Op) chan report {
	ch := make(chan report, len(ops)+1)
	go func() {
		defer close(ch)
		tiers.CheckEach(context.Background(), s, confT0, ops, func(i int, err error) { ch <- report{i, err} })
	}()
	return ch
}

// reportsOf waits for CheckEach to end and checks that every op was
// reported exactly once; it returns each op's error.
func reportsOf(t *testing.T, ch chan report, n int, got ...report) []error {
	t.Helper()
	errs := make([]error, n)
	seen := make([]bool, n)
	for rep := range ch {
		got = append(got, rep)
	}
	for _, rep := range got {
		if seen[rep.i] {
			t.Fatalf("op %d reported twice", rep.i)
		}
		seen[rep.i], errs[rep.i] = true, rep.err
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("op %d never reported", i)
		}
	}
	return errs
}

func TestRouter_AllHotOpIsAnsweredWhileAColdOpOfItsBatchWaitsForItsRow(t *testing.T) {
	t.Parallel()
	r, cold := newGroupRouter(t)
	c, h := tierstest.CellOnShard(t, cold, 0, 10), newConfCell(10, time.Hour)
	makeCold(t, r, c)
	routerCheck(t, r, confOp(confT0, 1, tiers.DryRun, h)) // places h hot
	ctx := context.Background()
	tx, err := cold.DBs()[0].BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	id := c.Ref().ID()
	if _, err := tx.ExecContext(ctx, "SELECT r FROM cold_cells WHERE k = ? FOR UPDATE", id[:]); err != nil {
		t.Fatal(err)
	}
	// Through the breaker, as quotad wires it.
	b := NewBreaker(r, clock.Real{}, 3, 100*time.Millisecond)
	ops := []*tiers.Op{confOp(confT0, 1, tiers.Enforce, c), confOp(confT0, 1, tiers.Enforce, h)}
	ch := checkEachAsync(b, ops...)
	var first report
	select {
	case first = <-ch:
	case <-time.After(5 * time.Second):
		tx.Rollback()
		t.Fatal("no op answered while the cold op's row was locked")
	}
	if first.i != 1 || first.err != nil || !ops[1].Committed || ops[1].Out[0].Remaining != 9 || ops[1].Out[0].Tier != tiers.Hot {
		t.Fatalf("first answer: op %d err %v, want the hot op allowed (%+v)", first.i, first.err, ops[1].Out)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	for i, err := range reportsOf(t, ch, 2, first) {
		if err != nil || !ops[i].Committed {
			t.Fatalf("op %d: %v committed %v", i, err, ops[i].Committed)
		}
	}
	if ops[0].Out[0].Tier != tiers.Cold || ops[0].Out[0].Remaining != 9 {
		t.Fatalf("cold op: %+v", ops[0].Out)
	}
}

func TestRouter_OpThatFailsGivesBackItsCountsAndTheOthersGetTheirDecisions(t *testing.T) {
	t.Parallel()
	r, cold := newGroupRouter(t)
	h1, h2, w := newConfCell(10, time.Hour), newConfCell(10, time.Hour), newConfCell(10, time.Hour)
	bad, c := tierstest.CellOnShard(t, cold, 0, 10), tierstest.CellOnShard(t, cold, 1, 10)
	routerCheck(t, r, confOp(confT0, 1, tiers.DryRun, h1, h2)) // places both hot
	makeWarm(t, r, w)
	makeCold(t, r, c)
	makeCold(t, r, bad)
	id := bad.Ref().ID()
	if _, err := cold.DBs()[0].Exec("UPDATE cold_cells SET r = ? WHERE k = ?", []byte("junk"), id[:]); err != nil {
		t.Fatal(err)
	}
	// The warm op makes the first go alone (not grouped with the cold op).
	ops := []*tiers.Op{
		confOp(confT0, 1, tiers.Enforce, h1, bad), // counts h1, then fails in cold
		confOp(confT0, 1, tiers.Enforce, w),
		confOp(confT0, 1, tiers.Enforce, c),
		confOp(confT0, 1, tiers.Enforce, h2),
	}
	errs := reportsOf(t, checkEachAsync(r, ops...), len(ops))
	if !errors.Is(errs[0], tiers.ErrRecordCorrupt) {
		t.Fatalf("op 0: err %v, want ErrRecordCorrupt", errs[0])
	}
	for i := 1; i < len(ops); i++ {
		if errs[i] != nil || !ops[i].Committed || ops[i].Out[0].Remaining != 9 {
			t.Fatalf("op %d: err %v committed %v %+v, want its own decision", i, errs[i], ops[i].Committed, ops[i].Out)
		}
	}
	for _, w := range []struct {
		name string
		c    confCell
		used int64
	}{{"failed op's hot cell", h1, 0}, {"warm cell", w, 1}, {"cold cell", c, 1}, {"hot cell", h2, 1}} {
		if used, _ := usedOf(t, r, w.c); used != w.used {
			t.Errorf("%s: %d used, want %d", w.name, used, w.used)
		}
	}
}

func TestCheckEach_StoreWithoutItReportsEveryOpWithCheck(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	hot := hot.NewStore(rdb, hot.Options{Prefix: prefix})
	a, b := newConfCell(1, time.Hour), newConfCell(1, time.Hour)
	ops := []*tiers.Op{confOp(confT0, 1, tiers.Enforce, a), confOp(confT0, 1, tiers.Enforce, b), confOp(confT0, 1, tiers.Enforce, a)}
	for i, err := range reportsOf(t, checkEachAsync(hot, ops...), len(ops)) {
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
	}
	if !ops[0].Committed || !ops[1].Committed || ops[2].Allowed() {
		t.Fatalf("allowed %v %v %v, want the second check of a denied", ops[0].Allowed(), ops[1].Allowed(), ops[2].Allowed())
	}
}
