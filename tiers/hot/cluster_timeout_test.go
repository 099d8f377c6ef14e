package hot_test

import (
	"context"
	"errors"
	"fmt"
	"net"
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
// accepted by the kernel, nothing answers), a check is answered
// unavailable within about QUOTA_REDIS_TIMEOUT with an error that says the
// backend timed out (a net.Error whose Timeout is true, not the caller's
// context.DeadlineExceeded, so routing.Breaker opens the master's circuit
// on the first one), and its script, sent once, runs once when the master
// wakes. go-redis' cluster client used to send it again on new
// connections, MaxRedirects times (several timeouts without CallTimeout);
// with CallTimeout the deadline stopped that loop but was reported as
// context.DeadlineExceeded, which the breaker did not count as a timeout.
// Each call now goes to its master's own client, once, with or without the
// bound.
func TestCallTimeout_BoundsACheckBehindASilentClusterMaster(t *testing.T) {
	nodes, s, rdb, cc := silentClusterEnv(t)
	ctx := context.Background()
	silent := nodes[0]
	for _, bound := range []time.Duration{s.RedisTimeout, 0} {
		t.Run(fmt.Sprintf("CallTimeout %s", bound), func(t *testing.T) {
			store := hot.NewStore(rdb, hot.Options{Prefix: "cto:", CallTimeout: bound})
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
			if !errors.Is(err, tiers.ErrUnavailable) || !backendTimeout(err) {
				t.Fatalf("behind the silent master: %v, want ErrUnavailable and the backend's timeout", err)
			}
			if took > s.RedisTimeout+150*time.Millisecond {
				t.Fatalf("took %v, want about %v", took, s.RedisTimeout)
			}
			t.Logf("took %v: %v", took, err)
			// The woken master runs what it was sent: the check once more.
			direct := redis.NewClient(&redis.Options{Addr: silent.Addr()})
			defer direct.Close()
			deadline := time.Now().Add(5 * time.Second)
			for {
				n, err := direct.Get(ctx, key).Int64()
				if err == nil && n == 2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("count %d (%v), want 2: the check ran more than once", n, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond) // a second run would land by now
			if n, _ := direct.Get(ctx, key).Int64(); n != 2 {
				t.Fatalf("count %d, want 2: the check ran more than once", n)
			}
		})
	}
}

// One batch with a check on a silent master and one on a healthy master:
// the healthy one is decided, and only the silent one fails, as the
// backend's timeout. Through go-redis' cluster pipeline the deadline that
// ended its retries was set on every command, so the healthy master's
// answered check failed too (as context.DeadlineExceeded).
func TestCallTimeout_ASilentMasterFailsOnlyItsOwnChecksInABatch(t *testing.T) {
	nodes, s, rdb, cc := silentClusterEnv(t)
	ctx := context.Background()
	store := hot.NewStore(rdb, hot.Options{Prefix: "ctb:", CallTimeout: s.RedisTimeout})
	onSilent, _ := cellOn(t, ctx, cc, store, nodes[0].Addr())
	onHealthy, healthyKey := cellOn(t, ctx, cc, store, nodes[1].Addr())
	ops := func() []*tiers.Op {
		return []*tiers.Op{{Cost: 1, Cells: []tiers.Cell{onSilent}}, {Cost: 1, Cells: []tiers.Cell{onHealthy}}}
	}
	if err := store.CheckEach(ctx, tierstest.T0, ops(), func(int, error) {}); err != nil {
		t.Fatalf("before the fault: %v", err)
	}
	if err := nodes[0].Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nodes[0].Signal(syscall.SIGCONT) }()
	errs := make([]error, 2)
	batch := ops()
	_ = store.CheckEach(ctx, tierstest.T0, batch, func(i int, err error) { errs[i] = err })
	if !errors.Is(errs[0], tiers.ErrUnavailable) || !backendTimeout(errs[0]) {
		t.Errorf("the silent master's check: %v, want ErrUnavailable and the backend's timeout", errs[0])
	}
	if errs[1] != nil || !batch[1].Committed {
		t.Errorf("the healthy master's check: %v (committed %v), want decided", errs[1], batch[1].Committed)
	}
	direct := redis.NewClient(&redis.Options{Addr: nodes[1].Addr()})
	defer direct.Close()
	if n, err := direct.Get(ctx, healthyKey).Int64(); err != nil || n != 2 {
		t.Errorf("healthy count %d (%v), want 2", n, err)
	}
}

// backendTimeout is routing.Breaker's test of a backend that hung: a
// net.Error timeout that is not the caller's own deadline.
func backendTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() && !errors.Is(err, context.DeadlineExceeded)
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

// silentClusterEnv is a 3-master cluster and quotad's client of it, with
// a 250 ms Redis timeout.
func silentClusterEnv(t *testing.T) ([]*testenv.RedisProcess, config.Settings, redis.UniversalClient, *redis.ClusterClient) {
	t.Helper()
	nodes := testenv.StartRedisCluster(t, 3)
	s := config.Defaults()
	s.RedisAddrs, s.RedisCluster, s.RedisTimeout = nil, true, 250*time.Millisecond
	for _, n := range nodes {
		s.RedisAddrs = append(s.RedisAddrs, n.Addr())
	}
	rdb := redisconn.New(s)
	t.Cleanup(func() { rdb.Close() })
	return nodes, s, rdb, rdb.(*redis.ClusterClient)
}
