package tiers

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testenv"
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
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second, ReadTimeout: time.Second})
	t.Cleanup(func() { cc.Close() })
	hot := NewHotStore(cc, HotOptions{Prefix: "c:"})
	var r EachChecker = hot
	if routed {
		r = NewRouter(hot, NewWarmStore(cc, WarmOptions{Prefix: "c:"}), NewColdStore(testenv.MySQLShards(t, 1), ColdOptions{}))
	}
	partition := ClusterPartition(cc)
	ctx := context.Background()

	var cells []confCell
	for range 30 {
		cells = append(cells, newConfCell(100, time.Hour))
	}
	ops := func() []*Op {
		out := make([]*Op, len(cells))
		for i, c := range cells {
			out[i] = confOp(confT0, 1, Enforce, c)
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
		case onDead[i] && !errors.Is(errs[i], ErrUnavailable):
			t.Errorf("op %d on the dead master: %v, want ErrUnavailable", i, errs[i])
		case !onDead[i] && errs[i] != nil:
			t.Errorf("op %d on a live master failed: %v", i, errs[i])
		case !onDead[i] && (!op.Committed || op.Out[0].Remaining != 98):
			t.Errorf("op %d on a live master: committed %v remaining %d, want counted (98 left)", i, op.Committed, op.Out[0].Remaining)
		}
	}
}
