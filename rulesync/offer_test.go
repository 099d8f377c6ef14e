package rulesync_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/rulesync"
)

// Instances (re)started in turn, each with a file of the given limit, or a
// PUT (publish) in between: which limit is in force on the starting
// instance and in the store after each step.
func TestOffer_AFileNeverInForceWinsAndAReplacedOneDoesNot(t *testing.T) {
	t.Parallel()
	type step struct {
		start   int // a file of this limit offered by a starting instance
		publish int // or: rules of this limit published (PUT / SIGHUP)
		want    int // the limit in force (the starter's and the store's)
		outcome rulesync.Outcome
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"edited file and a restart put the edit in force", []step{
			{start: 5, want: 5, outcome: rulesync.Seeded},
			{start: 7, want: 7, outcome: rulesync.New},
		}},
		{"a restart with the same file keeps it", []step{
			{start: 5, want: 5, outcome: rulesync.Seeded},
			{start: 5, want: 5, outcome: rulesync.Current},
		}},
		{"a fleet rolled out with a new file, then one instance restarted with the old file", []step{
			{start: 5, want: 5, outcome: rulesync.Seeded},
			{start: 5, want: 5, outcome: rulesync.Current},
			{start: 7, want: 7, outcome: rulesync.New},
			{start: 7, want: 7, outcome: rulesync.Current},
			{start: 5, want: 7, outcome: rulesync.Stale},
		}},
		{"rules put through the API survive a restart with the file they replaced", []step{
			{start: 5, want: 5, outcome: rulesync.Seeded},
			{publish: 9, want: 9},
			{start: 5, want: 9, outcome: rulesync.Stale},
			{start: 6, want: 6, outcome: rulesync.New},
		}},
		{"going back to an old file needs an edit or SIGHUP: a restart keeps the fleet's", []step{
			{start: 5, want: 5, outcome: rulesync.Seeded},
			{start: 7, want: 7, outcome: rulesync.New},
			{start: 5, want: 7, outcome: rulesync.Stale},
			{publish: 5, want: 5},
			{start: 7, want: 5, outcome: rulesync.Stale},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb, prefix := testenv.Redis(t)
			ctx := context.Background()
			for i, st := range tc.steps {
				if st.publish != 0 {
					in := newInstance(rdb, prefix, "putter", ruleSet(t, 1))
					if err := in.y.Publish(ctx, ruleSet(t, st.publish)); err != nil {
						t.Fatal(err)
					}
				} else {
					file := ruleSet(t, st.start)
					var logs bytes.Buffer
					in := newInstance(rdb, prefix, fmt.Sprint("i", i), file)
					in.y.Log = slog.New(slog.NewTextHandler(&logs, nil))
					in.start(ctx, file)
					if got := in.cur.Load().Rules[0].Limit; got != int64(st.want) {
						t.Errorf("step %d: the starting instance has limit %d in force, want %d", i, got, st.want)
					}
					lost := strings.Contains(logs.String(), "level=WARN msg=\"the rules file lost to the shared store")
					if wantLost := st.outcome == rulesync.Stale || st.outcome == rulesync.Unknown; lost != wantLost {
						t.Errorf("step %d (%s): a warning that the file lost: %v, want %v\n%s", i, st.outcome, lost, wantLost, logs.String())
					}
				}
				e, err := rulesync.NewStore(rdb, prefix).Get(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if got := e.Set.Rules[0].Limit; got != int64(st.want) {
					t.Errorf("step %d: the store has limit %d in force, want %d", i, got, st.want)
				}
			}
		})
	}
}

// Store.Offer's answer after each write, straight from the store.
func TestOffer_AnswersWhatTheStoreMadeOfTheFile(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	ctx := context.Background()
	st := rulesync.NewStore(rdb, prefix)
	v5, v7, v9 := ruleSet(t, 5), ruleSet(t, 7), ruleSet(t, 9)
	for i, tc := range []struct {
		offer   *rules.Set
		put     *rules.Set // written first, when not nil
		want    rulesync.Outcome
		wantSeq int64
	}{
		{offer: v5, want: rulesync.Seeded, wantSeq: 1},
		{offer: v5, want: rulesync.Current, wantSeq: 1},
		{offer: v7, want: rulesync.New, wantSeq: 2},
		{offer: v5, want: rulesync.Stale, wantSeq: 2},
		{put: v9, offer: v7, want: rulesync.Stale, wantSeq: 3},
		{offer: v9, want: rulesync.Current, wantSeq: 3},
	} {
		if tc.put != nil {
			if _, err := st.Put(ctx, tc.put, "put"); err != nil {
				t.Fatal(err)
			}
		}
		o, err := st.Offer(ctx, tc.offer, "x")
		if err != nil {
			t.Fatal(err)
		}
		if o.Outcome != tc.want || o.Seq != tc.wantSeq {
			t.Errorf("step %d: %+v, want %s at seq %d", i, o, tc.want, tc.wantSeq)
		}
		if o.Outcome == rulesync.Stale && (o.SeenAt.IsZero() || time.Since(o.SeenAt) > time.Minute) {
			t.Errorf("step %d: stale version first in force at %v", i, o.SeenAt)
		}
	}
}

// A store written before versions were remembered (no seen: fields) keeps
// its rules once and says so; from then on its version is remembered, so
// the next restart with the edited file puts it in force and a restart with
// the store's old version does not roll it back.
func TestOffer_AStoreThatPredatesRememberedVersionsKeepsItsRulesOnce(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	ctx := context.Background()
	st := rulesync.NewStore(rdb, prefix)
	old, edited := ruleSet(t, 5), ruleSet(t, 7)
	if _, err := st.Seed(ctx, old, "old-quotad"); err != nil {
		t.Fatal(err)
	}
	// What an older quotad's seed left: no seen: fields.
	if err := rdb.HDel(ctx, st.Key(), "seen:"+old.Version).Err(); err != nil {
		t.Fatal(err)
	}
	for i, want := range []rulesync.Outcome{rulesync.Unknown, rulesync.New} {
		o, err := st.Offer(ctx, edited, "x")
		if err != nil || o.Outcome != want {
			t.Fatalf("offer %d: %+v %v, want %s", i, o, err, want)
		}
	}
	if o, err := st.Offer(ctx, old, "x"); err != nil || o.Outcome != rulesync.Stale {
		t.Fatalf("the old store's version offered again: %+v %v, want stale", o, err)
	}
}

// The remembered versions are bounded: after 1,100 writes the store holds
// 900 to 1,000 of them (the oldest forgotten first), and the hash stays
// small.
func TestOffer_RemembersAtMostAThousandVersions(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	ctx := context.Background()
	st := rulesync.NewStore(rdb, prefix)
	for i := range 1100 {
		if _, err := st.Put(ctx, ruleSet(t, 100+i), "put"); err != nil {
			t.Fatal(err)
		}
	}
	fields, err := rdb.HKeys(ctx, st.Key()).Result()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range fields {
		if strings.HasPrefix(f, "seen:") {
			seen++
		}
	}
	if seen < 900 || len(fields) > 1000 {
		t.Fatalf("%d versions remembered in %d fields after 1,100 writes, want 900 to 1,000 fields", seen, len(fields))
	}
	// The newest are kept: the version replaced last is still stale.
	if o, _ := st.Offer(ctx, ruleSet(t, 100+1098), "x"); o.Outcome != rulesync.Stale {
		t.Fatalf("a recent version offered again: %s, want stale", o.Outcome)
	}
	n, _ := rdb.MemoryUsage(ctx, st.Key()).Result()
	t.Logf("rules hash after 1,100 writes: %d fields, %d remembered versions, %d bytes (MEMORY USAGE)", len(fields), seen, n)
}

// Plans live in the rules file and its version covers them: a file whose
// plans alone were edited wins at a restart, and the old one then does not
// roll them back; the store carries the plans to every instance.
func TestOffer_AnEditOfThePlansAloneIsANewVersion(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	ctx := context.Background()
	withPlan := func(limit int) *rules.Set {
		set, err := rules.ParseYAML(fmt.Appendf(nil, "rules:\n  - {name: app_daily, dimensions: [app_id], limit: 10, window: day, algorithm: fixed_window}\nplans:\n  pro: {app_daily: %d}\n", limit))
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	old, edited := withPlan(100), withPlan(200)
	st := rulesync.NewStore(rdb, prefix)
	for i, tc := range []struct {
		offer *rules.Set
		want  rulesync.Outcome
	}{{old, rulesync.Seeded}, {edited, rulesync.New}, {old, rulesync.Stale}} {
		if o, err := st.Offer(ctx, tc.offer, "x"); err != nil || o.Outcome != tc.want {
			t.Fatalf("offer %d: %+v %v, want %s", i, o, err, tc.want)
		}
	}
	e, err := st.Get(ctx)
	if err != nil || e.Set.Version != edited.Version || e.Set.Plans["pro"]["app_daily"].Limit != 200 {
		t.Fatalf("store: %+v %v, want the edited plans", e.Set, err)
	}
}

// A store that holds rules but does not answer at start (paused here):
// the instance starts on its file and offers it once the store answers. A
// file the store has never had in force then wins for every instance; one
// it has had in force loses, and the instance takes the store's rules.
func TestBootstrap_AFileOfferedWhenTheStoreAnswersAgainFollowsTheSameRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		file      int // limit of the starting instance's file
		wantLimit int64
	}{
		{"a new file wins", 7, 7},
		{"a file the fleet replaced loses", 5, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := testenv.StartRedis(t)
			rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
			defer rdb.Close()
			ctx := context.Background()
			fleet := newInstance(rdb, "q:", "fleet", ruleSet(t, 5))
			fleet.start(ctx, ruleSet(t, 5))
			if err := fleet.y.Publish(ctx, ruleSet(t, 9)); err != nil { // 5 replaced by 9
				t.Fatal(err)
			}
			if err := rdb.Do(ctx, "CLIENT", "PAUSE", "300", "ALL").Err(); err != nil {
				t.Fatal(err)
			}
			file := ruleSet(t, tc.file)
			in := newInstance(rdb, "q:", "late", file)
			sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			in.start(sctx, file)
			cancel()
			if in.cur.Load() != file {
				t.Fatalf("with the store paused the file's rules are not in force: %s", in.cur.Load().Version)
			}
			if err := rdb.Ping(ctx).Err(); err != nil { // answered once the pause is over
				t.Fatal(err)
			}
			in.y.Poll(ctx)
			fleet.y.Poll(ctx)
			for name, i := range map[string]*instance{"the late instance": in, "the fleet": fleet} {
				if got := i.cur.Load().Rules[0].Limit; got != tc.wantLimit {
					t.Errorf("%s has limit %d in force, want %d", name, got, tc.wantLimit)
				}
			}
		})
	}
}
