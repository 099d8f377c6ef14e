package redisscript_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/redisscript"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

var incr = redis.NewScript(`return redis.call('INCRBY', KEYS[1], ARGV[1])`)

// A pipeline whose script Redis lost (SCRIPT FLUSH, a restart) runs each
// call exactly once: refused with NOSCRIPT, loaded, sent again.
func TestRunEach_AfterRedisLostTheScriptEachCallRunsOnce(t *testing.T) {
	t.Parallel()
	// A server of its own: SCRIPT FLUSH would disturb other tests' scripts.
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	prefix := "t:"
	ctx := context.Background()
	for _, n := range []int{1, 3} {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		calls := make([]redisscript.Call, n)
		for i := range calls {
			calls[i] = redisscript.Call{Keys: []string{prefix + string(rune('a'+i))}, Args: []any{n}}
		}
		cmds, err := redisscript.RunEach(ctx, rdb, incr, calls)
		if err != nil {
			t.Fatalf("%d calls: %v", n, err)
		}
		for i, c := range cmds {
			if err := c.Err(); err != nil {
				t.Fatalf("%d calls: call %d: %v", n, i, err)
			}
		}
	}
	// Every key was counted once per run: a by 1 then 3, b and c by 3.
	for k, want := range map[string]int64{"a": 4, "b": 3, "c": 3} {
		if got, err := rdb.Get(ctx, prefix+k).Int64(); err != nil || got != want {
			t.Errorf("%s = %d (%v), want %d", k, got, err, want)
		}
	}
}
