package redisconn_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/redisconn"
)

// go-redis stops dialling after PoolSize failed dials and then tries once a
// second; New's dialer keeps its failures from counting, so a client
// that failed many dials reaches a returning Redis at once. (With go-redis'
// own dialer this test waits about a second for the gate: it fails.)
func TestDialer_ManyFailedDialsDoNotDelayTheReturn(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	r.Kill()
	s := config.Defaults()
	s.RedisAddrs = []string{r.Addr()}
	s.RedisPoolSize = 2
	s.RedisTimeout = 200 * time.Millisecond
	rdb := redisconn.New(s)
	defer rdb.Close()
	ctx := context.Background()
	for i := 0; i < 20; i++ { // ten times the gate, in the main and the pipeline pools
		if err := rdb.Ping(ctx).Err(); err == nil {
			t.Fatal("ping of a killed Redis succeeded")
		}
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Ping(ctx).Err() }); err == nil {
			t.Fatal("pipelined ping of a killed Redis succeeded")
		}
	}
	r.Start()
	back := time.Now()
	for rdb.Ping(ctx).Err() != nil {
		if time.Since(back) > 3*time.Second {
			t.Fatal("Redis not reachable 3 s after it returned")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if took := time.Since(back); took > 300*time.Millisecond {
		t.Fatalf("first successful ping %v after Redis returned, want < 300 ms (the dial gate retries once a second)", took)
	}
}
