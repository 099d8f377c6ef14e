package migrate

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testsupport/moveenv"
	"github.com/quota-platform/quota/tiers"
)

// On a Redis Cluster the cells of one batch live on several masters, and
// so do their lease keys (which carry no hash tag): a batch of cells of 40
// apps moves through every tier with its counts exact, and its leases are
// taken and released on each master.
func TestMoveCells_OnARedisClusterCellsOfManySlotsKeepTheirCounts(t *testing.T) {
	t.Parallel()
	e := newClusterEnv(t)

	cells := moveenv.NewCells(40, 100, 0)
	want := int64(0)
	from := tiers.Hot
	for _, to := range []tiers.Tier{tiers.Warm, tiers.Cold, tiers.Hot, tiers.Cold, tiers.Warm, tiers.Hot} {
		for range 2 {
			for _, c := range cells {
				if op := e.Check(t, tiers.Enforce, c); op == nil || !op.Allowed() {
					t.Fatalf("in %s: a check under the limit was not allowed", from)
				}
			}
			want++
		}
		e.Move(t, from, to, cells...)
		for _, c := range cells {
			if got := e.TierOf(t, c); got != to {
				t.Fatalf("%s>%s: tier %q", from, to, got)
			}
			if n := e.Count(t, c); n != want {
				t.Fatalf("%s>%s: count %d, want %d", from, to, n, want)
			}
		}
		from = to
	}
	leases := 0
	for _, n := range e.Nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr()})
		keys, err := c.Keys(t.Context(), "c:mig:lease:*").Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		leases += len(keys)
	}
	if leases != 0 {
		t.Fatalf("%d leases left after the moves", leases)
	}
}

// On a Redis Cluster quiet cells of 40 apps, half of them counted, go cold
// in one move: the state read and the switch, which name each cell's
// counters beside its tag's header, run once per tag (one slot), and the
// cells are then exact.
func TestMoveQuietToCold_OnARedisClusterCellsOfManySlots(t *testing.T) {
	t.Parallel()
	e := newClusterEnv(t)
	cells := moveenv.NewCells(40, 3, 0)
	for _, c := range cells[:20] {
		e.Check(t, tiers.Enforce, c)
	}
	e.mover.Faults = afterStep(func(s Step) error {
		if s != StepQuietCopy {
			t.Errorf("step %s of the full protocol ran", s)
		}
		return nil
	})
	e.Move(t, tiers.Hot, tiers.Cold, cells...)
	e.mover.Faults = nil
	for i, c := range cells {
		e.expectCell(t, "quiet cell moved on a cluster", c, tiers.Cold, int64(1-i/20))
	}
}

// On a Redis Cluster a check whose cells are warm under two tags (two hash
// slots) is decided all or nothing: the cell of limit 3 allows three, and
// the other cell counts those three only, every later check being denied
// and given back.
func TestRouter_OnAClusterAWarmCheckOfTwoTagsIsAllOrNothing(t *testing.T) {
	t.Parallel()
	e := newClusterEnv(t)
	tight, loose := moveenv.NewCell(3), moveenv.NewCell(100)
	e.Move(t, tiers.Hot, tiers.Warm, tight, loose)
	allowed := 0
	for range 6 {
		op := e.Check(t, tiers.Enforce, tight, loose)
		if op == nil {
			t.FailNow()
		}
		if op.Allowed() {
			allowed++
		}
	}
	if allowed != 3 {
		t.Fatalf("%d checks allowed, want 3", allowed)
	}
	for _, c := range []moveenv.Cell{tight, loose} {
		if got := e.TierOf(t, c); got != tiers.Warm {
			t.Fatalf("tier %q, want warm", got)
		}
		if n := e.Count(t, c); n != 3 {
			t.Fatalf("count %d, want 3", n)
		}
	}
}
