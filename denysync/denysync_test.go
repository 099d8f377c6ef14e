package denysync_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/denysync"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// Poll drops the cache when the key moved, and only then; a Redis that
// does not answer drops it at every poll (the instance cannot vouch for
// what it holds).
func TestPoll_ClearsWhenTheKeyMovesOrCannotBeRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	cleared := 0
	s := denysync.New(rdb, prefix, func() { cleared++ })
	other := denysync.New(rdb, prefix, func() {})
	steps := []struct {
		name string
		do   func() error
		want int
	}{
		{"first read of an absent key", func() error { return s.Poll(ctx) }, 0},
		{"unchanged", func() error { return s.Poll(ctx) }, 0},
		{"another instance bumps", func() error { return other.Bump(ctx) }, 0},
		{"read after the bump", func() error { return s.Poll(ctx) }, 1},
		{"unchanged again", func() error { return s.Poll(ctx) }, 1},
		{"a bump here clears here at once", func() error { return s.Bump(ctx) }, 2},
		{"and its own read clears again", func() error { return s.Poll(ctx) }, 3},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if cleared != st.want {
			t.Fatalf("%s: cleared %d times, want %d", st.name, cleared, st.want)
		}
	}
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer dead.Close()
	n := 0
	d := denysync.New(dead, prefix, func() { n++ })
	for i := range 2 {
		if err := d.Poll(ctx); err == nil || n != i+1 {
			t.Fatalf("poll %d of an unreachable Redis: %v, cleared %d times", i, err, n)
		}
	}
}
