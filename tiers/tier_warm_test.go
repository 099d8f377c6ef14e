package tiers

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testenv"
	"github.com/quota-platform/quota/rules"
)

// Warm-tier specifics: bucket layout, the compare-and-set under races, and
// what it does with values it cannot read.

func newWarm(t *testing.T, o WarmOptions) (*WarmStore, *redis.Client, string) {
	rdb, prefix := testenv.Redis(t)
	o.Prefix = prefix
	return NewWarmStore(rdb, o), rdb, prefix
}

func TestWarm_BucketsStayListpacksUnderStockConfig(t *testing.T) {
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
	const perTag = 5000
	s := NewWarmStore(rdb, WarmOptions{Prefix: "w:", BucketsPerTag: WarmBucketsFor(perTag)})
	var recs []Record
	for range perTag {
		c := newConfCell(10, time.Hour)
		c.app = "one-app" // one tag, perTag cells
		recs = append(recs, Record{Ref: c.ref(), Count: 3, Last: recT, First: recT - 86400*3, MeanInterval: 900, Samples: 20})
	}
	if err := s.Import(ctx, recs); err != nil {
		t.Fatal(err)
	}
	keys, err := rdb.Keys(ctx, "w:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != WarmBucketsFor(perTag) {
		t.Fatalf("%d hashes, want %d", len(keys), WarmBucketsFor(perTag))
	}
	largest := int64(0)
	for _, k := range keys {
		n := rdb.HLen(ctx, k).Val()
		largest = max(largest, n)
		if enc := rdb.ObjectEncoding(ctx, k).Val(); enc != "listpack" {
			t.Fatalf("hash %q of %d fields is %s", k, n, enc)
		}
		for f, v := range rdb.HGetAll(ctx, k).Val() {
			if len(f) != 7 || len(v) != 10 { // the default field width; 8 raw bytes + 2 of snappy
				t.Fatalf("field %d bytes, value %d bytes; want 7 and 10", len(f), len(v))
			}
		}
	}
	t.Logf("%d cells in %d hashes, largest %d", perTag, len(keys), largest)
}

func TestWarm_CellsWithoutAppArePooled(t *testing.T) {
	t.Parallel()
	s, _, prefix := newWarm(t, WarmOptions{BucketsPerTag: 2, PoolBits: 4})
	keys := map[string]bool{}
	for range 2000 {
		c := newConfCell(1, time.Hour).at(confT0)
		c.Tag = TagOfIdentity(c.Identity) // a rule without app_id
		ref := RefOf(&c)
		k, f := s.Locate(&ref)
		if len(k) != len(prefix)+len("{abcdef}w")+2 || len(f) != 7 {
			t.Fatalf("key %q field %x", k, f)
		}
		keys[k] = true
	}
	if len(keys) > 16*2 {
		t.Fatalf("%d hashes for 2000 cells without app, want at most 2^4 pools * 2 buckets", len(keys))
	}
}

func TestWarm_LostRaceIsRetriedAndCountsExactlyOnce(t *testing.T) {
	t.Parallel()
	s, rdb, prefix := newWarm(t, WarmOptions{})
	other := NewWarmStore(rdb, WarmOptions{Prefix: prefix})
	ctx := context.Background()
	c := newConfCell(2, time.Hour)
	// Between our read and our write, another server takes the last unit
	// but one: our op must be decided again, and so must the dry run after
	// it, which read the state our op would have left.
	s.beforeCAS = func(attempt int) {
		if attempt == 1 {
			if err := other.Check(ctx, confT0, []*Op{confOp(confT0, 1, Enforce, c)}); err != nil {
				t.Error(err)
			}
		}
	}
	ops := []*Op{confOp(confT0, 1, Enforce, c), confOp(confT0, 1, DryRun, c)}
	if err := s.Check(ctx, confT0, ops); err != nil {
		t.Fatal(err)
	}
	if !ops[0].Committed || ops[0].Out[0].Remaining != 0 {
		t.Fatalf("op 0: %+v", ops[0])
	}
	if ops[1].Allowed() {
		t.Fatalf("dry run after the limit was reached allowed: %+v", ops[1].Out)
	}
	recs, err := s.Export(ctx, []Ref{c.ref()})
	if err != nil || len(recs) != 1 || recs[0].Count != 2 {
		t.Fatalf("count: %+v %v", recs, err)
	}
}

func TestWarm_EndlessContentionGivesUpAndCountsNothing(t *testing.T) {
	t.Parallel()
	s, rdb, prefix := newWarm(t, WarmOptions{MaxAttempts: 3})
	other := NewWarmStore(rdb, WarmOptions{Prefix: prefix})
	ctx := context.Background()
	c := newConfCell(100, time.Hour)
	s.beforeCAS = func(int) {
		if err := other.Check(ctx, confT0, []*Op{confOp(confT0, 1, Enforce, c)}); err != nil {
			t.Error(err)
		}
	}
	err := s.Check(ctx, confT0, []*Op{confOp(confT0, 1, Enforce, c)})
	if !errors.Is(err, ErrContention) {
		t.Fatalf("err %v, want ErrContention", err)
	}
	recs, _ := s.Export(ctx, []Ref{c.ref()})
	if len(recs) != 1 || recs[0].Count != 3 {
		t.Fatalf("count %+v, want 3 (the other writer's only)", recs)
	}
}

func TestWarm_CorruptValueFailsTheCheckAndStays(t *testing.T) {
	t.Parallel()
	s, rdb, _ := newWarm(t, WarmOptions{})
	ctx := context.Background()
	c := newConfCell(10, time.Hour)
	ref := c.ref()
	k, f := s.Locate(&ref)
	rdb.HSet(ctx, k, f, "\x05garbage")
	err := s.Check(ctx, confT0, []*Op{confOp(confT0, 1, Enforce, c)})
	if !errors.Is(err, ErrRecordCorrupt) {
		t.Fatalf("err %v, want ErrRecordCorrupt", err)
	}
	if v := rdb.HGet(ctx, k, f).Val(); v != "\x05garbage" {
		t.Fatalf("value overwritten: %q", v)
	}
}

func TestWarm_MovedRecordIsNotCounted(t *testing.T) {
	t.Parallel()
	s, _, _ := newWarm(t, WarmOptions{})
	ctx := context.Background()
	c := newConfCell(10, time.Hour)
	if err := s.Import(ctx, []Record{{Ref: c.ref(), Count: 4, Last: confT0.Unix(), First: confT0.Unix(), Moved: true}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx, confT0, []*Op{confOp(confT0, 1, Enforce, c)}); !errors.Is(err, ErrMoved) {
		t.Fatalf("err %v, want ErrMoved", err)
	}
}

func TestWarm_SurvivesAScriptFlush(t *testing.T) {
	t.Parallel()
	p := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	s := NewWarmStore(rdb, WarmOptions{Prefix: "w:"})
	a, b := newConfCell(3, time.Hour), newConfCell(3, time.Hour)
	for i := range 4 {
		rdb.ScriptFlush(ctx)
		ops := []*Op{confOp(confT0, 1, Enforce, a), confOp(confT0, 1, Enforce, b)}
		if err := s.Check(ctx, confT0, ops); err != nil {
			t.Fatal(err)
		}
		if ops[0].Committed != (i < 3) || ops[1].Committed != (i < 3) {
			t.Fatalf("round %d: %v %v", i, ops[0].Committed, ops[1].Committed)
		}
	}
}

func TestWarmCold_RejectOtherAlgorithmsAndOldTimes(t *testing.T) {
	t.Parallel()
	s, _, _ := newWarm(t, WarmOptions{})
	cold := NewColdStore(nil, ColdOptions{})
	c := newConfCell(10, time.Hour)
	for _, st := range []Store{s, cold} {
		op := confOp(confT0, 1, Enforce, c)
		op.Cells[0].Algorithm = rules.TokenBucket
		if err := st.Check(context.Background(), confT0, []*Op{op}); err == nil {
			t.Errorf("%s counted a token bucket", st.Tier())
		}
	}
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := s.Check(context.Background(), old, []*Op{confOp(old, 1, Enforce, c)}); err == nil {
		t.Error("warm counted at a time its record cannot hold")
	}
}

// Concurrent checks on one warm cell in one process queue on the cell's
// in-process lock instead of losing compare-and-sets to each other: even
// with 2 attempts each, 32 goroutines all count, exactly, also through a
// WithClient copy of the store.
func TestWarm_ConcurrentChecksOnOneCellInOneProcessAllCount(t *testing.T) {
	t.Parallel()
	s, rdb, _ := newWarm(t, WarmOptions{MaxAttempts: 2})
	// Half the callers go through a copy on another client (as quotad's
	// mover does): it shares the locks.
	other := redis.NewClient(rdb.Options())
	t.Cleanup(func() { other.Close() })
	stores := []*WarmStore{s, s.WithClient(other)}
	ctx := context.Background()
	c := newConfCell(10_000, time.Hour)
	var wg sync.WaitGroup
	errs := make(chan error, 32*10)
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if err := stores[g%2].Check(ctx, confT0, []*Op{confOp(confT0, 1, Enforce, c)}); err != nil {
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
	recs, err := s.Export(ctx, []Ref{c.ref()})
	if err != nil || len(recs) != 1 || recs[0].Count != 320 {
		t.Fatalf("count: %+v %v, want 320", recs, err)
	}
}

func TestWarmLocks_AllocateNothingForAFewCells(t *testing.T) {
	w := newWarmLocks()
	locs := []warmLoc{{key: "q:{abcdef}w\x00\x01", field: "1234567"}, {key: "q:{abcdef}w\x00\x02", field: "7654321"}}
	n := testing.AllocsPerRun(100, func() {
		var buf [16]uint16
		w.unlock(w.lock(locs, buf[:0]))
	})
	if n != 0 {
		t.Fatalf("lock+unlock of 2 cells allocates %v times", n)
	}
}
