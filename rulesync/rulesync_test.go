package rulesync_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/rulesync"
)

func ruleSet(t *testing.T, limit int) *rules.Set {
	t.Helper()
	set, err := rules.ParseYAML(fmt.Appendf(nil, "rules:\n  - {name: per_user, dimensions: [user_id], limit: %d, window: 1h, algorithm: fixed_window}\n", limit))
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// instance is what a quotad is to the syncer: the rules in force, and a
// count of how many times they were replaced.
type instance struct {
	cur     atomic.Pointer[rules.Set]
	applied atomic.Int64
	y       *rulesync.Syncer
}

func newInstance(rdb redis.UniversalClient, prefix, name string, file *rules.Set) *instance {
	in := &instance{}
	in.cur.Store(file)
	in.y = &rulesync.Syncer{
		Store:   rulesync.NewStore(rdb, prefix),
		Current: func() *rules.Set { return in.cur.Load() },
		Check: func(s *rules.Set) error {
			if len(s.Rules) > 0 && s.Rules[0].Limit == 13 { // what this binary refuses
				return errors.New("limit 13 is refused here")
			}
			return nil
		},
		Apply: func(s *rules.Set) error { in.cur.Store(s); in.applied.Add(1); return nil },
		Log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Name:  name,
	}
	return in
}

func (in *instance) start(ctx context.Context, file *rules.Set) {
	in.cur.Store(in.y.Bootstrap(ctx, file))
}

// started is one instance on the test Redis, started with a file of limit
// 5 (which seeds the store).
func started(t *testing.T) (*instance, redis.UniversalClient, *rules.Set) {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	file := ruleSet(t, 5)
	in := newInstance(rdb, prefix, "a", file)
	in.start(context.Background(), file)
	return in, rdb, file
}

// The first instance seeds the store; the next, started with a file the
// store has never had in force, puts its file in force for both.
func TestBootstrap_FirstInstanceSeedsTheStoreAndANewFileAtTheNextStartWins(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	ctx := context.Background()
	a, b := ruleSet(t, 5), ruleSet(t, 7)
	ia := newInstance(rdb, prefix, "a", a)
	ia.start(ctx, a)
	ib := newInstance(rdb, prefix, "b", b)
	ib.start(ctx, b)
	if ia.cur.Load().Version != a.Version || ib.cur.Load().Version != b.Version {
		t.Fatalf("in force: a %s, b %s; want a's file %s, then b's %s", ia.cur.Load().Version, ib.cur.Load().Version, a.Version, b.Version)
	}
	e, err := ia.y.Store.Get(ctx)
	if err != nil || e.Seq != 2 || e.By != "b" || e.Set.Version != b.Version {
		t.Fatalf("store: %+v %v", e, err)
	}
	ia.y.Poll(ctx)
	if ia.cur.Load().Version != b.Version {
		t.Fatalf("a did not follow b's file: %s", ia.cur.Load().Version)
	}
}

func TestPublish_ReachesEveryInstanceAtItsNextPoll(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	file := ruleSet(t, 5)
	var ins []*instance
	for i := range 3 {
		in := newInstance(rdb, prefix, fmt.Sprint(i), file)
		in.start(ctx, file)
		go in.y.Run(ctx, 100*time.Millisecond)
		ins = append(ins, in)
	}
	next := ruleSet(t, 9)
	began := time.Now()
	if err := ins[0].y.Publish(ctx, next); err != nil {
		t.Fatal(err)
	}
	if ins[0].cur.Load().Version != next.Version {
		t.Fatal("the publishing instance did not put its rules in force at once")
	}
	for i, in := range ins[1:] {
		for in.cur.Load().Version != next.Version {
			if time.Since(began) > 2*time.Second {
				t.Fatalf("instance %d still on %s 2 s after the publish", i+1, in.cur.Load().Version)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	t.Logf("3 instances polling every 100ms: all on the new version %s after the publish", time.Since(began).Round(time.Millisecond))
}

func TestPublish_InvalidRulesOrAnUnreachableStoreChangeNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, _, file := started(t)
	if err := in.y.Publish(ctx, ruleSet(t, 13)); err == nil || errors.Is(err, rulesync.ErrUnavailable) {
		t.Fatalf("publish of rules the instance refuses: %v", err)
	}
	if seq, _ := in.y.Store.Seq(ctx); seq != 1 || in.cur.Load() != file {
		t.Fatalf("refused rules changed something: seq %d, in force %s", seq, in.cur.Load().Version)
	}

	r := testenv.StartRedis(t)
	dead := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer dead.Close()
	down := newInstance(dead, "q:", "b", file)
	down.start(ctx, file)
	r.Kill()
	err := down.y.Publish(ctx, ruleSet(t, 6))
	if !errors.Is(err, rulesync.ErrUnavailable) || down.cur.Load() != file || down.applied.Load() != 0 {
		t.Fatalf("publish with the store down: %v, in force %s", err, down.cur.Load().Version)
	}
}

// Redis down at start: the file's rules are in force; once Redis answers
// (empty, as a Redis without persistence restarts) the instance seeds it
// with the rules in force, and follows what is written there.
func TestBootstrap_StoreDownAtStartUsesTheFileThenFollowsTheStore(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	r.Kill()
	ctx := context.Background()
	file := ruleSet(t, 5)
	in := newInstance(rdb, "q:", "a", file)
	in.start(ctx, file)
	if in.cur.Load() != file {
		t.Fatal("the file's rules are not in force with the store down")
	}
	in.y.Poll(ctx) // still down: nothing changes
	r.Start()
	in.y.Poll(ctx)
	e, err := in.y.Store.Get(ctx)
	if err != nil || e.Set == nil || e.Set.Version != file.Version {
		t.Fatalf("the returning empty store was not seeded with the rules in force: %+v %v", e, err)
	}
	other := newInstance(rdb, "q:", "b", file)
	other.start(ctx, file)
	if err := other.y.Publish(ctx, ruleSet(t, 8)); err != nil {
		t.Fatal(err)
	}
	in.y.Poll(ctx)
	if got := in.cur.Load(); got.Rules[0].Limit != 8 {
		t.Fatalf("not following the store: limit %d in force", got.Rules[0].Limit)
	}
}

// Rules in the store that this instance refuses (written by a newer quotad,
// or by hand) are not applied and not retried; a later valid write is.
func TestPoll_RefusedStoreRulesKeepTheRulesInForce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, rdb, file := started(t)
	if _, err := in.y.Store.Put(ctx, ruleSet(t, 13), "elsewhere"); err != nil {
		t.Fatal(err)
	}
	in.y.Poll(ctx)
	if in.cur.Load() != file {
		t.Fatalf("refused rules were applied: %s", in.cur.Load().Version)
	}
	rdb.HSet(ctx, in.y.Store.Key(), "doc", `{"rules":[{"name":"x"}]}`)
	rdb.HIncrBy(ctx, in.y.Store.Key(), "seq", 1)
	in.y.Poll(ctx)
	if in.cur.Load() != file || in.applied.Load() != 0 {
		t.Fatalf("invalid stored rules were applied: %s", in.cur.Load().Version)
	}
	if _, err := in.y.Store.Put(ctx, ruleSet(t, 6), "elsewhere"); err != nil {
		t.Fatal(err)
	}
	in.y.Poll(ctx)
	if in.cur.Load().Rules[0].Limit != 6 {
		t.Fatalf("a valid write after refused ones was not applied: %s", in.cur.Load().Version)
	}
}

// Rules put in force here without going through the store (two writes
// racing) are replaced by the store's at the next poll.
func TestPoll_RulesThatDifferFromTheStoreAreReplaced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, _, file := started(t)
	in.cur.Store(ruleSet(t, 4))
	in.y.Poll(ctx)
	if in.cur.Load().Version != file.Version {
		t.Fatalf("in force %s, store %s", in.cur.Load().Version, file.Version)
	}
}
