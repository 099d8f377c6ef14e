package redisconn_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/redisconn"
)

// With QUOTA_REDIS_SENTINEL_MASTER, Probe asks the sentinel for the master
// and pings it: it succeeds while the master answers, and fails for a name
// the sentinel does not know or once the master is gone (a sentinel
// answering proves nothing about the master). Free ports, not testenv's
// fixed ones: cmd/quotad's tests may hold those meanwhile.
func TestProbe_AsksTheSentinelForTheMaster(t *testing.T) {
	t.Parallel()
	main := testenv.StartRedisServer(t, testenv.FreePort(t), nil)
	sentPort := testenv.FreePort(t)
	sentAddr := "127.0.0.1:" + strconv.Itoa(sentPort)
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\nsentinel monitor quota-main 127.0.0.1 %d 1\nsentinel down-after-milliseconds quota-main 60000\n", sentPort, main.Port)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.StartRedisServer(t, sentPort, func(ctx context.Context) error {
		c := redis.NewSentinelClient(&redis.Options{Addr: sentAddr, MaxRetries: -1})
		defer c.Close()
		return c.GetMasterAddrByName(ctx, "quota-main").Err()
	}, conf, "--sentinel")
	probe := func(master string) error {
		env := map[string]string{"QUOTA_REDIS_ADDRS": sentAddr, "QUOTA_REDIS_SENTINEL_MASTER": master}
		s, err := config.Load(func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return redisconn.Probe(s)(ctx)
	}
	if err := probe("quota-main"); err != nil {
		t.Fatalf("master up: %v", err)
	}
	if err := probe("other"); err == nil {
		t.Fatal("a master the sentinel does not know: probe succeeded")
	}
	main.Kill()
	if err := probe("quota-main"); err == nil {
		t.Fatal("master killed, the sentinel still up: probe succeeded")
	}
}
