package hot_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/internal/testsupport/tierstest"
	"github.com/quota-platform/quota/redisconn"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/hot"
)

// Behind a cluster master that has gone silent (SIGSTOP: connections are
// accepted by the kernel, nothing answers), a check with CallTimeout is
// answered unavailable within about QUOTA_REDIS_TIMEOUT and its script,
// sent once, runs once when the master wakes; without the bound go-redis'
// cluster client sends it again on new connections, MaxRedirects times,
// and the check waits several timeouts.
func TestCallTimeout_BoundsACheckBehindASilentClusterMaster(t *testing.T) {
	nodes := testenv.StartRedisCluster(t, 3)
	s := config.Defaults()
	s.RedisAddrs, s.RedisCluster, s.RedisTimeout = nil, true, 250*time.Millisecond
	for _, n := range nodes {
		s.RedisAddrs = append(s.RedisAddrs, n.Addr())
	}
	rdb := redisconn.New(s)
	t.Cleanup(func() { rdb.Close() })
	cc := rdb.(*redis.ClusterClient)
	ctx := context.Background()
	silent := nodes[0]
	for _, tc := range []struct {
		name       string
		bound      time.Duration
		atMost     time.Duration // 0: no upper bound
		atLeast    time.Duration
		runsAtMost int64 // 0: not checked (go-redis may run it up to MaxRedirects+1 times)
	}{
		{"bounded", s.RedisTimeout, s.RedisTimeout + 350*time.Millisecond, 0, 1},
		{"unbounded", 0, 0, 3 * s.RedisTimeout, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := hot.NewStore(rdb, hot.Options{Prefix: "cto:", CallTimeout: tc.bound})
			cell, key := cellOn(t, ctx, cc, store, silent.Addr())
			if err := store.Check(ctx, tierstest.T0, []*tiers.Op{{Cost: 1, Cells: []tiers.Cell{cell}}}); err != nil {
				t.Fatalf("before the fault: %v", err)
			}
			if err := silent.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			err := store.Check(ctx, tierstest.T0, []*tiers.Op{{Cost: 1, Cells: []tiers.Cell{cell}}})
			took := time.Since(began)
			if err := silent.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(err, tiers.ErrUnavailable) {
				t.Fatalf("behind the silent master: %v, want ErrUnavailable", err)
			}
			if took < tc.atLeast || (tc.atMost > 0 && took > tc.atMost) {
				t.Fatalf("took %v, want %v..%v", took, tc.atLeast, tc.atMost)
			}
			t.Logf("took %v", took)
			if tc.runsAtMost == 0 {
				return
			}
			// The woken master runs what it was sent: the check once more.
			direct := redis.NewClient(&redis.Options{Addr: silent.Addr()})
			defer direct.Close()
			deadline := time.Now().Add(5 * time.Second)
			for {
				n, err := direct.Get(ctx, key).Int64()
				if err == nil && n == 1+tc.runsAtMost {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("count %d (%v), want %d: the check ran more than once", n, err, 1+tc.runsAtMost)
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond) // a second run would land by now
			if n, _ := direct.Get(ctx, key).Int64(); n != 1+tc.runsAtMost {
				t.Fatalf("count %d, want %d: the check ran more than once", n, 1+tc.runsAtMost)
			}
		})
	}
}

// cellOn is a fixed-window cell whose hot key lives on the master at addr.
func cellOn(t *testing.T, ctx context.Context, cc *redis.ClusterClient, s *hot.Store, addr string) (tiers.Cell, string) {
	t.Helper()
	for range 1000 {
		cell := tierstest.NewCell(100, time.Hour).At(tierstest.T0)
		key := s.Key(&cell)
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr == addr {
			return cell, key
		}
	}
	t.Fatalf("no cell on %s", addr)
	return tiers.Cell{}, ""
}
