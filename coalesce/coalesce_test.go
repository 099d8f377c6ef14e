package coalesce_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/coalesce"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/hot"
)

func newLimiter(t *testing.T, rdb redis.UniversalClient, prefix string, limit int) *limiter.Limiter {
	t.Helper()
	set, err := rules.NewSet([]rules.Rule{{
		Name: "per_user", Dimensions: []string{"user_id"}, Limit: int64(limit),
		Window: rules.Duration(time.Hour), Algorithm: rules.FixedWindow,
	}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limiter.New(hot.NewStore(rdb, hot.Options{Prefix: prefix}), clock.Real{}, set)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func req(user string) *limiter.Request {
	return &limiter.Request{Cost: 1, Dims: []limiter.Dim{{Name: "user_id", Value: user}}}
}

func TestCoalescer_ConcurrentChecksAllowExactlyTheLimit(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := coalesce.New(newLimiter(t, rdb, prefix, 1000), 4, 64)
	defer c.Close()
	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 50; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				d, err := c.Check(context.Background(), req("shared"))
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					allowed.Add(1)
				} else {
					denied.Add(1)
				}
				// Each goroutine's own identity: its 40 calls must all be
				// allowed, with remaining falling by one each time.
				own, err := c.Check(context.Background(), req("own-"+string(rune('a'+g))))
				if err != nil || !own.Allowed || own.Entries[0].Remaining != int64(1000-i-1) {
					t.Errorf("goroutine %d call %d: %+v %v", g, i, own, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	if allowed.Load() != 1000 || denied.Load() != 1000 {
		t.Fatalf("allowed %d denied %d, want 1000 and 1000", allowed.Load(), denied.Load())
	}
}

func TestCoalescer_StoreErrorsReachEveryCaller(t *testing.T) {
	t.Parallel()
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 50 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})
	defer dead.Close()
	c := coalesce.New(newLimiter(t, dead, "x:", 10), 2, 16)
	defer c.Close()
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Check(context.Background(), req("u")); !errors.Is(err, tiers.ErrUnavailable) {
				t.Errorf("want ErrUnavailable, got %v", err)
			}
		}()
	}
	wg.Wait()
}
