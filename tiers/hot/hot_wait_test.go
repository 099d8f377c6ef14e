package hot

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/tiers"
)

// With WaitReplicas set, a check is final only once a replica holds its
// count: against a master with a live replica it is decided as usual; with
// no replica to acknowledge it, it fails as ErrUnavailable (the fail mode
// answers it), though the count was made. The script cache of a restarted
// master is reloaded as without WAIT.
func TestHotWait_DecisionIsFinalOnlyOnceAReplicaHoldsTheCount(t *testing.T) {
	t.Parallel()
	// A directory each: a full sync writes an RDB file on both sides.
	master := testenv.StartRedisWith(t, "--dir", t.TempDir())
	lonely := testenv.StartRedis(t)
	replica := testenv.StartRedisWith(t, "--dir", t.TempDir(), "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	ctx := context.Background()
	rrdb := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	t.Cleanup(func() { rrdb.Close() })
	if err := pollInfo(ctx, rrdb, "master_link_status:up"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		addr      string
		ops       int // ops in one Check (1: a single call; 2: a pipeline)
		wantFinal bool
		// timeout: long where a replica must acknowledge (a loaded machine
		// can take tens of ms), short where none can.
		timeout time.Duration
	}{
		{"a master with a replica, one call", master.Addr(), 1, true, 2 * time.Second},
		{"a master with a replica, a pipeline", master.Addr(), 2, true, 2 * time.Second},
		{"a master without a replica, one call", lonely.Addr(), 1, false, 30 * time.Millisecond},
		{"a master without a replica, a pipeline", lonely.Addr(), 2, false, 30 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: tc.addr})
			t.Cleanup(func() { rdb.Close() })
			if err := rdb.ScriptFlush(ctx).Err(); err != nil { // NOSCRIPT is handled with WAIT too
				t.Fatal(err)
			}
			hot := NewStore(rdb, Options{Prefix: "w" + testenv.RandomHex(3) + ":", WaitReplicas: 1, WaitTimeout: tc.timeout})
			var ops []*tiers.Op
			for range tc.ops {
				ops = append(ops, confOp(confT0, 1, tiers.Enforce, newConfCell(5, time.Hour)))
			}
			start := time.Now()
			err := hot.Check(ctx, confT0, ops)
			took := time.Since(start)
			if tc.wantFinal {
				if err != nil {
					t.Fatalf("check: %v", err)
				}
				for _, op := range ops {
					if !op.Committed || op.Out[0].Remaining != 4 {
						t.Errorf("committed %v remaining %d; want counted once (4 left)", op.Committed, op.Out[0].Remaining)
					}
				}
				return
			}
			if !errors.Is(err, tiers.ErrUnavailable) || !strings.Contains(err.Error(), "0 of 1 replicas") {
				t.Fatalf("err = %v; want ErrUnavailable naming the replicas", err)
			}
			if took < tc.timeout {
				t.Errorf("answered in %s, before the WAIT timeout", took)
			}
			// The count was made all the same: an unacknowledged write is
			// kept (counting too much is the safe side).
			if n := testenv.CountKeys(ctx, rdb, hot.prefix); n != tc.ops {
				t.Errorf("%d counters in Redis, want %d", n, tc.ops)
			}
		})
	}
}

func pollInfo(ctx context.Context, rdb *redis.Client, want string) error {
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if s, _ := rdb.Info(ctx, "replication").Result(); strings.Contains(s, want) {
			return nil
		}
	}
	return errors.New("replica: no " + want + " within 10 s")
}
