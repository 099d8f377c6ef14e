package routing

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/cold"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/warm"
)

// On a Redis Cluster with one master dead, a batch of checks over every
// master decides the checks of the live masters and fails only those of
// the dead one's slots (before, the first failed call failed the batch),
// through the tier router and through the hot store alone (tiering off).
func TestRouter_OnAClusterADeadMasterFailsOnlyTheChecksOfItsSlots(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"router", "hot store"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			deadMasterFailsOnlyItsChecks(t, name == "router")
		})
	}
}

func deadMasterFailsOnlyItsChecks(t *testing.T, routed bool) {
	nodes := testenv.StartRedisCluster(t, 3)
	cc := testenv.ClusterClient(t, nodes, &redis.ClusterOptions{MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second, ReadTimeout: time.Second})
	hot := hot.NewStore(cc, hot.Options{Prefix: "c:"})
	var r tiers.EachChecker = hot
	if routed {
		r = NewRouter(hot, warm.NewStore(cc, warm.Options{Prefix: "c:"}), cold.NewStore(testenv.MySQLShards(t, 1), cold.Options{}))
	}
	partition := ClusterPartition(cc)
	ctx := context.Background()

	var cells []confCell
	for range 30 {
		cells = append(cells, newConfCell(100, time.Hour))
	}
	ops := func() []*tiers.Op {
		out := make([]*tiers.Op, len(cells))
		for i, c := range cells {
			out[i] = confOp(confT0, 1, tiers.Enforce, c)
		}
		return out
	}
	if err := r.Check(ctx, confT0, ops()); err != nil {
		t.Fatalf("all masters up: %v", err)
	}
	dead := nodes[0].Addr()
	batch := ops()
	onDead := make([]bool, len(batch))
	n := 0
	for i, op := range batch {
		onDead[i] = partition(ctx, op) == dead
		if onDead[i] {
			n++
		}
	}
	if n == 0 || n == len(batch) {
		t.Fatalf("%d of %d cells on %s: want some on each side", n, len(batch), dead)
	}
	nodes[0].Kill()

	errs := make([]error, len(batch))
	_ = r.CheckEach(ctx, confT0, batch, func(i int, err error) { errs[i] = err })
	for i, op := range batch {
		switch {
		case onDead[i] && !errors.Is(errs[i], tiers.ErrUnavailable):
			t.Errorf("op %d on the dead master: %v, want ErrUnavailable", i, errs[i])
		case !onDead[i] && errs[i] != nil:
			t.Errorf("op %d on a live master failed: %v", i, errs[i])
		case !onDead[i] && (!op.Committed || op.Out[0].Remaining != 98):
			t.Errorf("op %d on a live master: committed %v remaining %d, want counted (98 left)", i, op.Committed, op.Out[0].Remaining)
		}
	}
}

// A cell of a rule without app_id is tagged by its identity's pool, and its
// hot key, warm bucket and cold filter share that one slot: on a Redis
// Cluster its checks are enforced, alone and beside an app's cell (before,
// its hot key and its directory header hashed to different slots and every
// such check failed with CROSSSLOT).
func TestRouter_OnAClusterCellsWithoutAppAreEnforced(t *testing.T) {
	t.Parallel()
	cc := testenv.ClusterClient(t, testenv.StartRedisCluster(t, 3), nil)
	r := NewRouter(hot.NewStore(cc, hot.Options{Prefix: "c:"}), warm.NewStore(cc, warm.Options{Prefix: "c:"}), cold.NewStore(testenv.MySQLShards(t, 1), cold.Options{}))
	ctx := context.Background()
	for range 20 {
		noApp, withApp := newConfCell(2, time.Hour), newConfCell(5, time.Hour)
		for n := int64(1); n <= 3; n++ {
			alone := confOp(confT0, 1, tiers.Enforce, noApp)
			both := confOp(confT0, 1, tiers.Enforce, noApp, withApp)
			for _, op := range []*tiers.Op{alone, both} {
				id := op.Cells[0].Identity
				op.Cells[0].Tag, op.Cells[0].ShardKey = tiers.TagOfIdentity(id), tiers.ShardKeyOfIdentity(id)
			}
			if err := r.Check(ctx, confT0, []*tiers.Op{alone}); err != nil {
				t.Fatalf("check %d of a cell without app: %v", n, err)
			}
			if err := r.Check(ctx, confT0, []*tiers.Op{both}); err != nil {
				t.Fatalf("check %d of a cell without app beside an app's: %v", n, err)
			}
			// Limit 2, two units a round: the first round fills it.
			if want := n == 1; alone.Committed != want || both.Committed != (n == 1) {
				t.Fatalf("round %d: committed alone %v, both %v; want %v", n, alone.Committed, both.Committed, want)
			}
		}
	}
}

// A cluster master that goes silent (SIGSTOP) opens its circuit on the
// first check that times out behind it: the next check of its slots is
// answered at once instead of waiting out another QUOTA_REDIS_TIMEOUT, and
// a check of a healthy master in the same batch is decided. Before, the
// hot store's call deadline ended go-redis' retries with
// context.DeadlineExceeded on every command of the pipeline, which the
// breaker does not take for the backend's timeout: it opened only after
// three such failures, and a check queued meanwhile waited two timeouts
// (398–483 ms in make test-partitions, timeout 250 ms).
func TestBreaker_ASilentClusterMasterOpensItsCircuitOnTheFirstTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 250 * time.Millisecond
	nodes := testenv.StartRedisCluster(t, 3)
	cc := testenv.ClusterClient(t, nodes, &redis.ClusterOptions{MaxRetries: -1, DialerRetries: 1,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, PoolTimeout: timeout})
	h := hot.NewStore(cc, hot.Options{Prefix: "bs:", CallTimeout: timeout})
	silentProbe := func(context.Context, string) error { return errors.New("still silent") }
	b := NewBreaker(h, clock.Real{}, 3, 100*time.Millisecond).WithPartitions(ClusterPartition(cc), silentProbe, timeout)
	partition := ClusterPartition(cc)
	ctx := context.Background()
	var onSilent, onHealthy confCell
	found := 0
	for found != 3 {
		c := newConfCell(100, time.Hour)
		switch partition(ctx, confOp(confT0, 1, tiers.Enforce, c)) {
		case nodes[0].Addr():
			onSilent, found = c, found|1
		case nodes[1].Addr():
			onHealthy, found = c, found|2
		}
	}
	ops := func() []*tiers.Op {
		return []*tiers.Op{confOp(confT0, 1, tiers.Enforce, onSilent), confOp(confT0, 1, tiers.Enforce, onHealthy)}
	}
	if err := b.CheckEach(ctx, confT0, ops(), func(int, error) {}); err != nil {
		t.Fatalf("before the fault: %v", err)
	}
	if err := nodes[0].Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nodes[0].Signal(syscall.SIGCONT) }()
	// Round 0: the silent master's check alone (one call); then with a
	// healthy master's check in the same batch (a pipeline).
	for round := range 3 {
		errs := make([]error, 2)
		batch := ops()
		if round == 0 {
			batch = batch[:1]
		}
		began := time.Now()
		_ = b.CheckEach(ctx, confT0, batch, func(i int, err error) { errs[i] = err })
		took := time.Since(began)
		t.Logf("round %d: %v; silent %v, healthy %v", round, took, errs[0], errs[1])
		if !errors.Is(errs[0], tiers.ErrUnavailable) {
			t.Errorf("round %d: the silent master's check: %v, want ErrUnavailable", round, errs[0])
		}
		if round > 0 && (errs[1] != nil || !batch[1].Committed) {
			t.Errorf("round %d: the healthy master's check: %v, want decided", round, errs[1])
		}
		if round > 0 && (!errors.Is(errs[0], ErrCircuitOpen) || took > 100*time.Millisecond) {
			t.Errorf("round %d took %v (%v): want the circuit open after the first timeout", round, took, errs[0])
		}
	}
}
