package limiter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers/hot"
)

// denialRig is two limiters on one real Redis and one fake clock: plain
// asks Redis every time (the truth), cached answers from its denial cache
// when it can.
type denialRig struct {
	plain, cached *limiter.Limiter
	denials       *limiter.Denials
	clk           *clock.Fake
}

func newDenialRig(t testing.TB, rs []rules.Rule, size int) *denialRig {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	set, err := rules.NewSet(rs)
	if err != nil {
		t.Fatal(err)
	}
	// 7 ms into a minute, so windows of every length start at odd offsets.
	clk := clock.NewFake(time.Date(2026, 11, 29, 7, 0, 0, 7_000_000, time.UTC))
	store := hot.NewStore(rdb, hot.Options{Prefix: prefix})
	plain, err := limiter.New(store, clk, set)
	if err != nil {
		t.Fatal(err)
	}
	cached, err := limiter.New(store, clk, set)
	if err != nil {
		t.Fatal(err)
	}
	d := limiter.NewDenials(size)
	cached.UseDenials(d)
	return &denialRig{plain: plain, cached: cached, denials: d, clk: clk}
}

func dims(kv ...string) []limiter.Dim {
	var ds []limiter.Dim
	for i := 0; i < len(kv); i += 2 {
		ds = append(ds, limiter.Dim{Name: kv[i], Value: kv[i+1]})
	}
	return ds
}

var everyAlgorithm = []rules.Algorithm{rules.FixedWindow, rules.SlidingWindow, rules.TokenBucket, rules.SlidingLog, rules.MinInterval}

// checkEachWay decides reqs, in order, on l by one of its entry points:
// 0 CheckBatch, 1 Check, 2 the front door (DenialsFirst) as quotad calls
// it.
func checkEachWay(ctx context.Context, l *limiter.Limiter, way int, reqs []*limiter.Request) ([]limiter.Decision, error) {
	if way == 0 {
		return l.CheckBatch(ctx, reqs)
	}
	one := limiter.SingleChecker(l)
	if way == 2 {
		one = l.DenialsFirst(l)
	}
	out := make([]limiter.Decision, len(reqs))
	for i, req := range reqs {
		var err error
		if out[i], err = one.Check(ctx, req); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func sameDecision(a, b limiter.Decision) error {
	if a.Allowed != b.Allowed || len(a.Entries) != len(b.Entries) {
		return fmt.Errorf("allowed %v with %d entries, want %v with %d", a.Allowed, len(a.Entries), b.Allowed, len(b.Entries))
	}
	for i := range a.Entries {
		if a.Entries[i] != b.Entries[i] {
			return fmt.Errorf("entry %d: %+v, want %+v", i, a.Entries[i], b.Entries[i])
		}
	}
	return nil
}

// Every answer of a limiter with the cache equals the answer Redis gives
// at that instant (a dry run of the same check on a limiter without it),
// over random costs, modes, identities sharing cells and times, for every
// algorithm, with rules of one limit, of several limits, and several rules
// in one check.
func TestDenials_EveryCachedAnswerEqualsRedisAnswerForEveryAlgorithm(t *testing.T) {
	t.Parallel()
	for ai, algo := range everyAlgorithm {
		t.Run(string(algo), func(t *testing.T) {
			t.Parallel()
			rs := []rules.Rule{
				{Name: "per_user", Dimensions: []string{"user_id"}, Limit: 5, Window: rules.Duration(time.Minute), Algorithm: algo},
				// Several limits on one rule.
				{Name: "per_key", Dimensions: []string{"key"}, Algorithm: algo,
					Limits: []rules.Limit{{Limit: 3, Window: rules.Duration(time.Minute)}, {Limit: 7, Window: rules.Duration(5 * time.Minute)}}},
				// A cell shared by several users' checks.
				{Name: "per_ip", Dimensions: []string{"ip"}, Limit: 9, Window: rules.Duration(2 * time.Minute), Algorithm: algo},
			}
			rig := newDenialRig(t, rs, 1000)
			rng := rand.New(rand.NewPCG(uint64(ai), 52))
			ctx := context.Background()
			for step := range 3000 {
				var d []limiter.Dim
				switch rng.IntN(3) {
				case 0:
					d = dims("user_id", fmt.Sprint("u", rng.IntN(3)))
				case 1:
					d = dims("key", fmt.Sprint("k", rng.IntN(2)))
				default:
					d = dims("user_id", fmt.Sprint("v", rng.IntN(3)), "ip", fmt.Sprint("i", rng.IntN(2)))
				}
				req := &limiter.Request{Dims: d, Cost: 1 + rng.Int64N(3)}
				if rng.IntN(8) == 0 {
					req.Cost = 1 + rng.Int64N(10) // past some limits
				}
				switch rng.IntN(20) {
				case 0:
					req.Report = true
				case 1, 2, 3:
					req.DryRun = true
				}
				dry := *req
				dry.DryRun, dry.Report = true, false
				want, err := rig.plain.Check(ctx, &dry)
				if err != nil {
					t.Fatal(err)
				}
				got, err := checkEachWay(ctx, rig.cached, rng.IntN(3), []*limiter.Request{req})
				if err != nil {
					t.Fatal(err)
				}
				if !req.Report {
					if err := sameDecision(got[0], want); err != nil {
						t.Fatalf("step %d %+v at %s: %v", step, req, rig.clk.Now().Format(time.StampMilli), err)
					}
				}
				rig.clk.Advance(time.Duration(rng.Int64N(1200)) * time.Millisecond)
			}
			if rig.denials.Hits() < 50 {
				t.Fatalf("the cache answered %d checks of 3000: the test does not exercise it", rig.denials.Hits())
			}
			t.Logf("%s: %d of 3000 checks answered from the cache", algo, rig.denials.Hits())
		})
	}
}

// A shadow cell counts past its limit, and a cell that still allows
// changes with other identities' checks: such denials are not cached,
// unless the open cells are fixed_window ones the store reads alone
// (denials_peek_test.go). Nor is a denial of more cells than an entry
// holds, every one of them closed.
func TestDenials_DenialsWithAnOpenOrShadowCellOrTooManyCellsAreNotCached(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rs   []rules.Rule
		dims []limiter.Dim
	}{
		{"shadow", []rules.Rule{
			{Name: "per_user", Dimensions: []string{"user_id"}, Limit: 1, Window: rules.Duration(time.Hour), Algorithm: rules.FixedWindow},
			{Name: "per_user_shadow", Dimensions: []string{"user_id"}, Limit: 1, Window: rules.Duration(time.Hour), Algorithm: rules.FixedWindow, Shadow: true},
		}, dims("user_id", "a")},
		{"another rule allows, not fixed_window", []rules.Rule{
			{Name: "per_user", Dimensions: []string{"user_id"}, Limit: 1, Window: rules.Duration(time.Hour), Algorithm: rules.FixedWindow},
			{Name: "per_ip", Dimensions: []string{"ip"}, Limit: 100, Window: rules.Duration(time.Hour), Algorithm: rules.SlidingWindow},
		}, dims("user_id", "a", "ip", "x")},
		{"more cells than an entry holds", []rules.Rule{
			{Name: "per_user", Dimensions: []string{"user_id"}, Algorithm: rules.FixedWindow, Limits: []rules.Limit{
				{Limit: 1, Window: rules.Duration(time.Hour)}, {Limit: 1, Window: rules.Duration(2 * time.Hour)},
				{Limit: 1, Window: rules.Duration(3 * time.Hour)}, {Limit: 1, Window: rules.Duration(4 * time.Hour)},
				{Limit: 1, Window: rules.Duration(5 * time.Hour)}}},
		}, dims("user_id", "a")},
		{"another limit of the rule allows, not fixed_window", []rules.Rule{
			{Name: "per_user", Dimensions: []string{"user_id"}, Algorithm: rules.TokenBucket,
				Limits: []rules.Limit{{Limit: 1, Window: rules.Duration(time.Hour)}, {Limit: 100, Window: rules.Duration(24 * time.Hour)}}},
		}, dims("user_id", "a")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rig := newDenialRig(t, tt.rs, 100)
			ctx := context.Background()
			for i := range 5 {
				d, err := rig.cached.Check(ctx, &limiter.Request{Dims: tt.dims, Cost: 1})
				if err != nil || d.Allowed != (i == 0) {
					t.Fatalf("check %d: %+v %v", i, d, err)
				}
			}
			if rig.denials.Hits() != 0 || rig.denials.Len() != 0 {
				t.Fatalf("hits %d, entries %d, want none", rig.denials.Hits(), rig.denials.Len())
			}
		})
	}
}

// SetRules drops every cached denial: a raised limit lets the identity in
// at once.
func TestDenials_SetRulesLetsADeniedIdentityInAtOnce(t *testing.T) {
	t.Parallel()
	rule := rules.Rule{Name: "per_user", Dimensions: []string{"user_id"}, Limit: 1, Window: rules.Duration(time.Hour), Algorithm: rules.FixedWindow}
	rig := newDenialRig(t, []rules.Rule{rule}, 100)
	ctx := context.Background()
	req := &limiter.Request{Dims: dims("user_id", "a"), Cost: 1}
	for range 3 {
		if _, err := rig.cached.Check(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if rig.denials.Hits() != 1 {
		t.Fatalf("hits %d, want 1", rig.denials.Hits())
	}
	// The same limit again (a plan or override changed and came back
	// would look the same): the entry must still go.
	set, err := rules.NewSet([]rules.Rule{rule})
	if err != nil {
		t.Fatal(err)
	}
	if err := rig.cached.SetRules(set); err != nil {
		t.Fatal(err)
	}
	if _, err := rig.cached.Check(ctx, req); err != nil || rig.denials.Hits() != 1 {
		t.Fatalf("after SetRules: hits %d (%v), want the store asked", rig.denials.Hits(), err)
	}
	rule.Limit = 2
	set, err = rules.NewSet([]rules.Rule{rule})
	if err != nil {
		t.Fatal(err)
	}
	if err := rig.cached.SetRules(set); err != nil {
		t.Fatal(err)
	}
	if d, err := rig.cached.Check(ctx, req); err != nil || !d.Allowed {
		t.Fatalf("after raising the limit: %+v %v, want allowed", d, err)
	}
}

// A report call that counts in a closed cell drops the cache (its retry
// moves) and tells the fleet.
func TestDenials_ReportInAClosedCellClearsAndPublishes(t *testing.T) {
	t.Parallel()
	rule := rules.Rule{Name: "per_user", Dimensions: []string{"user_id"}, Limit: 2, Window: rules.Duration(time.Minute), Algorithm: rules.SlidingLog}
	rig := newDenialRig(t, []rules.Rule{rule}, 100)
	published := 0
	rig.denials.Publish = func() { published++ }
	ctx := context.Background()
	req := &limiter.Request{Dims: dims("user_id", "a"), Cost: 1}
	for range 3 {
		if _, err := rig.cached.Check(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	rig.clk.Advance(10 * time.Second)
	if _, err := rig.cached.Check(ctx, &limiter.Request{Dims: req.Dims, Cost: 1, Report: true}); err != nil {
		t.Fatal(err)
	}
	if published != 1 {
		t.Fatalf("published %d times, want 1", published)
	}
	hits := rig.denials.Hits()
	got, err := rig.cached.Check(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want, err := rig.plain.Check(ctx, &limiter.Request{Dims: req.Dims, Cost: 1, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if rig.denials.Hits() != hits {
		t.Fatal("answered from the cache after the report")
	}
	if err := sameDecision(got, want); err != nil {
		t.Fatal(err)
	}
}

// A million distinct denied identities leave the cache at its size, and
// its heap within a bound per entry.
func TestDenials_MemoryStaysWithinTheSizeUnderAMillionDeniedIdentities(t *testing.T) {
	// Not parallel: the heap it measures is the process's, and the other
	// tests' allocations would count as the cache's.
	const size = 10_000
	d := limiter.NewDenials(size)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	n := limiter.FillDenialsForTest(d, 1_000_000, time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC))
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n != 1_000_000 {
		t.Fatalf("remembered %d denials, want 1000000", n)
	}
	if d.Len() > d.Cap() || d.Cap() < size || d.Cap() > size+16 {
		t.Fatalf("entries %d, cap %d, setting %d", d.Len(), d.Cap(), size)
	}
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	const perEntry = 512
	if grown > size*perEntry {
		t.Fatalf("heap grew %d B for %d entries (%.0f B an entry), want at most %d an entry", grown, d.Len(), float64(grown)/float64(d.Len()), perEntry)
	}
	t.Logf("%d entries after 1,000,000 denials: heap +%d B (%.0f B an entry)", d.Len(), grown, float64(grown)/float64(d.Len()))
	runtime.KeepAlive(d)
}

// failChecker fails the test when a check reaches it.
type failChecker struct{ t *testing.T }

func (f failChecker) Check(context.Context, *limiter.Request) (limiter.Decision, error) {
	f.t.Error("the check went past the front door")
	return limiter.Decision{}, nil
}

// A denial the cache holds is answered at the front door, before the
// coalescer; one it does not hold goes on.
func TestDenialsFirst_AnswersCachedDenialsWithoutTheNextChecker(t *testing.T) {
	t.Parallel()
	rule := rules.Rule{Name: "per_user", Dimensions: []string{"user_id"}, Limit: 1, Window: rules.Duration(time.Hour), Algorithm: rules.FixedWindow}
	rig := newDenialRig(t, []rules.Rule{rule}, 100)
	ctx := context.Background()
	req := &limiter.Request{Dims: dims("user_id", "a"), Cost: 1}
	for range 2 {
		if _, err := rig.cached.Check(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	front := rig.cached.DenialsFirst(failChecker{t})
	for _, cost := range []int64{1, 5} {
		d, err := front.Check(ctx, &limiter.Request{Dims: dims("user_id", "a"), Cost: cost})
		if err != nil || d.Allowed || len(d.Entries) != 1 {
			t.Fatalf("cost %d: %+v %v", cost, d, err)
		}
	}
	var reached bool
	next := limiter.SingleChecker(checkerFunc(func() { reached = true }))
	if _, err := rig.cached.DenialsFirst(next).Check(ctx, &limiter.Request{Dims: dims("user_id", "b"), Cost: 1}); err != nil || !reached {
		t.Fatalf("an uncached request did not go on (%v)", err)
	}
}

type checkerFunc func()

func (f checkerFunc) Check(context.Context, *limiter.Request) (limiter.Decision, error) {
	f()
	return limiter.Decision{Allowed: true}, nil
}

// With the cache off (size 0) nothing is cached, but a report call past a
// limit still tells the fleet, whose instances may have theirs on.
func TestDenials_SizeZeroCachesNothingButStillPublishes(t *testing.T) {
	t.Parallel()
	rule := rules.Rule{Name: "per_user", Dimensions: []string{"user_id"}, Limit: 1, Window: rules.Duration(time.Hour), Algorithm: rules.FixedWindow}
	rig := newDenialRig(t, []rules.Rule{rule}, 0)
	published := 0
	rig.denials.Publish = func() { published++ }
	ctx := context.Background()
	req := &limiter.Request{Dims: dims("user_id", "a"), Cost: 1}
	for range 3 {
		if _, err := rig.cached.Check(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rig.cached.Check(ctx, &limiter.Request{Dims: req.Dims, Cost: 1, Report: true}); err != nil {
		t.Fatal(err)
	}
	if rig.denials.Hits() != 0 || rig.denials.Len() != 0 || published != 1 {
		t.Fatalf("hits %d, entries %d, published %d: want 0, 0, 1", rig.denials.Hits(), rig.denials.Len(), published)
	}
}
