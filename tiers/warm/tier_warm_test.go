package warm

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/tiers"
)

// Warm-tier specifics: bucket layout, the compare-and-set under races, and
// what it does with values it cannot read.

func newWarm(t *testing.T, o Options) (*Store, *redis.Client, string) {
	rdb, prefix := testenv.Redis(t)
	o.Prefix = prefix
	return NewStore(rdb, o), rdb, prefix
}

// A tag's buckets follow its warm cells (linear hashing, split at 96):
// whether a tag holds a hundred cells or thousands, imported at once or one
// by one, every bucket stays a listpack under redis.conf's 128 entries,
// buckets are about half full or more, and no record is lost by a split.
func TestWarm_BucketsFollowTheTagsPopulationAndStayListpacks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		perTag, step int // cells, and how many are imported at a time
	}{
		{"100 cells, one import", 100, 100},
		{"5000 cells, one import", 5000, 5000},
		{"1000 cells, one at a time", 1000, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// A private server with redis.conf's hash-max-listpack-entries 128
			// (the compiled-in default of 7.0 is 512, and so is the shared one's).
			p := testenv.StartRedis(t)
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
			defer rdb.Close()
			ctx := context.Background()
			if err := rdb.ConfigSet(ctx, "hash-max-listpack-entries", "128").Err(); err != nil {
				t.Fatal(err)
			}
			s := NewStore(rdb, Options{Prefix: "w:"})
			var recs []tiers.Record
			for i := range tc.perTag {
				c := newConfCell(10, time.Hour)
				c.App = "one-app" // one tag, perTag cells
				recs = append(recs, tiers.Record{Ref: c.Ref(), Count: int64(1 + i%7), Last: recT, First: recT - 86400*3, MeanInterval: 900, Samples: 20})
			}
			for i := 0; i < len(recs); i += tc.step {
				if err := s.Import(ctx, recs[i:min(i+tc.step, len(recs))]); err != nil {
					t.Fatal(err)
				}
			}
			keys, err := rdb.Keys(ctx, "w:{*}w*").Result()
			if err != nil {
				t.Fatal(err)
			}
			largest, total := int64(0), int64(0)
			for _, k := range keys {
				n := rdb.HLen(ctx, k).Val()
				largest, total = max(largest, n), total+n
				if enc := rdb.ObjectEncoding(ctx, k).Val(); enc != "listpack" {
					t.Fatalf("hash %q of %d fields is %s", k, n, enc)
				}
				for f, v := range rdb.HGetAll(ctx, k).Val() {
					if len(f) != 7 || len(v) != 8 { // the default field width; 8 raw bytes, no framing
						t.Fatalf("field %d bytes, value %d bytes; want 7 and 8", len(f), len(v))
					}
				}
			}
			t.Logf("%d cells in %d hashes, largest %d", tc.perTag, len(keys), largest)
			if total != int64(tc.perTag) || largest >= 128 || len(keys) > tc.perTag/40+1 {
				t.Fatalf("%d fields in %d hashes, largest %d: want %d fields, under 128 a hash, at least 40 a hash", total, len(keys), largest, tc.perTag)
			}
			refs := make([]tiers.Ref, len(recs))
			for i := range recs {
				refs[i] = recs[i].Ref
			}
			got, err := s.Export(ctx, refs)
			if err != nil || len(got) != len(recs) {
				t.Fatalf("exported %d of %d records: %v", len(got), len(recs), err)
			}
			for i := range got {
				if got[i].Count != recs[i].Count {
					t.Fatalf("record %d: count %d, want %d", i, got[i].Count, recs[i].Count)
				}
			}
		})
	}
}

func TestWarm_CellsWithoutAppArePooled(t *testing.T) {
	t.Parallel()
	s, _, prefix := newWarm(t, Options{})
	keys := map[string]bool{}
	for range 20000 {
		c := newConfCell(1, time.Hour).At(confT0)
		c.Tag = tiers.TagOfIdentity(c.Identity) // a rule without app_id
		l := s.Locate(c.Identity, c.Window, c.Tag)
		if len(l.base) != len(prefix)+len("{abcdef}") || len(l.Field) != 7 {
			t.Fatalf("tag %q field %x", l.base, l.Field)
		}
		keys[l.base] = true
	}
	if len(keys) > 4096 {
		t.Fatalf("%d tags for 20000 cells without app, want at most 4096 pools", len(keys))
	}
}

// scriptHook runs before before each command, or pipeline, that calls the
// script sha by EVALSHA.
type scriptHook struct {
	sha    string
	before func()
}

func (h scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.calls(cmd) {
			h.before()
		}
		return next(ctx, cmd)
	}
}

func (h scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, h.calls) {
			h.before()
		}
		return next(ctx, cmds)
	}
}

func (h scriptHook) calls(cmd redis.Cmder) bool {
	a := cmd.Args()
	return len(a) > 1 && a[0] == "evalsha" && a[1] == h.sha
}

// racedWarm returns a store on rdb's server (under prefix) whose client
// runs race before each round of compare-and-set calls (warm_cas.lua) it
// sends, rounds counted from 1: another server's write then comes in
// between the store's read and its write.
func racedWarm(t *testing.T, rdb *redis.Client, o Options, race func(round int)) *Store {
	t.Helper()
	opts := *rdb.Options()
	client := redis.NewClient(&opts)
	t.Cleanup(func() { client.Close() })
	s := NewStore(client, o)
	// Loaded first, so that no NOSCRIPT retry is taken for a round.
	if err := s.cas.Load(context.Background(), client).Err(); err != nil {
		t.Fatal(err)
	}
	var round atomic.Int64
	client.AddHook(scriptHook{sha: s.cas.Hash(), before: func() { race(int(round.Add(1))) }})
	return s
}

func TestWarm_LostRaceIsRetriedAndCountsExactlyOnce(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	other := NewStore(rdb, Options{Prefix: prefix})
	ctx := context.Background()
	c := newConfCell(2, time.Hour)
	// Between our read and our write, another server takes the last unit
	// but one: our op must be decided again, and so must the dry run after
	// it, which read the state our op would have left.
	s := racedWarm(t, rdb, Options{Prefix: prefix}, func(round int) {
		if round == 1 {
			if err := other.Check(ctx, confT0, []*tiers.Op{confOp(confT0, 1, tiers.Enforce, c)}); err != nil {
				t.Error(err)
			}
		}
	})
	ops := []*tiers.Op{confOp(confT0, 1, tiers.Enforce, c), confOp(confT0, 1, tiers.DryRun, c)}
	if err := s.Check(ctx, confT0, ops); err != nil {
		t.Fatal(err)
	}
	if !ops[0].Committed || ops[0].Out[0].Remaining != 0 {
		t.Fatalf("op 0: %+v", ops[0])
	}
	if ops[1].Allowed() {
		t.Fatalf("dry run after the limit was reached allowed: %+v", ops[1].Out)
	}
	recs, err := s.Export(ctx, []tiers.Ref{c.Ref()})
	if err != nil || len(recs) != 1 || recs[0].Count != 2 {
		t.Fatalf("count: %+v %v", recs, err)
	}
}

func TestWarm_EndlessContentionGivesUpAndCountsNothing(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	other := NewStore(rdb, Options{Prefix: prefix})
	ctx := context.Background()
	c := newConfCell(100, time.Hour)
	s := racedWarm(t, rdb, Options{Prefix: prefix, MaxAttempts: 3}, func(int) {
		if err := other.Check(ctx, confT0, []*tiers.Op{confOp(confT0, 1, tiers.Enforce, c)}); err != nil {
			t.Error(err)
		}
	})
	err := s.Check(ctx, confT0, []*tiers.Op{confOp(confT0, 1, tiers.Enforce, c)})
	if !errors.Is(err, tiers.ErrContention) {
		t.Fatalf("err %v, want ErrContention", err)
	}
	recs, _ := s.Export(ctx, []tiers.Ref{c.Ref()})
	if len(recs) != 1 || recs[0].Count != 3 {
		t.Fatalf("count %+v, want 3 (the other writer's only)", recs)
	}
}

func TestWarm_CorruptValueFailsTheCheckAndStays(t *testing.T) {
	t.Parallel()
	s, rdb, _ := newWarm(t, Options{})
	ctx := context.Background()
	c := newConfCell(10, time.Hour)
	ref := c.Ref()
	// The tag's only bucket: a tag with no header has one.
	l := s.Locate(ref.Identity, ref.Window, ref.Tag)
	k, f := l.base+"w\x00\x00", l.Field
	rdb.HSet(ctx, k, f, "\x05garbage")
	rdb.SetRange(ctx, l.HeaderKey(), 0, "\x01") // the tag has warm fields
	err := s.Check(ctx, confT0, []*tiers.Op{confOp(confT0, 1, tiers.Enforce, c)})
	if !errors.Is(err, tiers.ErrRecordCorrupt) {
		t.Fatalf("err %v, want ErrRecordCorrupt", err)
	}
	if v := rdb.HGet(ctx, k, f).Val(); v != "\x05garbage" {
		t.Fatalf("value overwritten: %q", v)
	}
}

func TestWarm_MovedRecordIsNotCounted(t *testing.T) {
	t.Parallel()
	s, _, _ := newWarm(t, Options{})
	ctx := context.Background()
	c := newConfCell(10, time.Hour)
	if err := s.Import(ctx, []tiers.Record{{Ref: c.Ref(), Count: 4, Last: confT0.Unix(), First: confT0.Unix(), Moved: true}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx, confT0, []*tiers.Op{confOp(confT0, 1, tiers.Enforce, c)}); !errors.Is(err, tiers.ErrMoved) {
		t.Fatalf("err %v, want ErrMoved", err)
	}
}

func TestWarm_SurvivesAScriptFlush(t *testing.T) {
	t.Parallel()
	p := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	s := NewStore(rdb, Options{Prefix: "w:"})
	a, b := newConfCell(3, time.Hour), newConfCell(3, time.Hour)
	for i := range 4 {
		rdb.ScriptFlush(ctx)
		ops := []*tiers.Op{confOp(confT0, 1, tiers.Enforce, a), confOp(confT0, 1, tiers.Enforce, b)}
		if err := s.Check(ctx, confT0, ops); err != nil {
			t.Fatal(err)
		}
		if ops[0].Committed != (i < 3) || ops[1].Committed != (i < 3) {
			t.Fatalf("round %d: %v %v", i, ops[0].Committed, ops[1].Committed)
		}
	}
}

// Concurrent checks on one warm cell in one process queue on the cell's
// in-process lock instead of losing compare-and-sets to each other: even
// with 2 attempts each, 32 goroutines all count, exactly, also through a
// WithClient copy of the store.
func TestWarm_ConcurrentChecksOnOneCellInOneProcessAllCount(t *testing.T) {
	t.Parallel()
	s, rdb, _ := newWarm(t, Options{MaxAttempts: 2})
	// Half the callers go through a copy on another client (as quotad's
	// mover does): it shares the locks.
	other := redis.NewClient(rdb.Options())
	t.Cleanup(func() { other.Close() })
	stores := []*Store{s, s.WithClient(other)}
	ctx := context.Background()
	c := newConfCell(10_000, time.Hour)
	var wg sync.WaitGroup
	errs := make(chan error, 32*10)
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if err := stores[g%2].Check(ctx, confT0, []*tiers.Op{confOp(confT0, 1, tiers.Enforce, c)}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("check: %v", err)
	}
	recs, err := s.Export(ctx, []tiers.Ref{c.Ref()})
	if err != nil || len(recs) != 1 || recs[0].Count != 320 {
		t.Fatalf("count: %+v %v, want 320", recs, err)
	}
}

func TestWarmLocks_AllocateNothingForAFewCells(t *testing.T) {
	w := newWarmLocks()
	locs := []DirLoc{{base: "q:{abcdef}", Field: "1234567"}, {base: "q:{abcdef}", Field: "7654321"}}
	n := testing.AllocsPerRun(100, func() {
		var buf [16]uint16
		w.unlock(w.lock(locs, buf[:0]))
	})
	if n != 0 {
		t.Fatalf("lock+unlock of 2 cells allocates %v times", n)
	}
}
