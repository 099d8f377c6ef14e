package limiter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers/hot"
)

// twinRig is two worlds on one real Redis (two key prefixes) and one fake
// clock, sent the same checks: truth has no denial cache, cached has one.
// Every answer must be the same in both.
type twinRig struct {
	truth, cached *limiter.Limiter
	denials       *limiter.Denials
	clk           *clock.Fake
}

func newTwinRig(t testing.TB, rs []rules.Rule) *twinRig {
	t.Helper()
	set, err := rules.NewSet(rs)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 11, 29, 7, 0, 0, 7_000_000, time.UTC))
	world := func() *limiter.Limiter {
		rdb, prefix := testenv.Redis(t)
		l, err := limiter.New(hot.NewStore(rdb, hot.Options{Prefix: prefix}), clk, set)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	r := &twinRig{truth: world(), cached: world(), denials: limiter.NewDenials(1000), clk: clk}
	r.cached.UseDenials(r.denials)
	return r
}

// Denials whose other cells still allow are cached when those cells are
// fixed_window: their counts are read afresh (one GET) for each answer.
// Over random identities (flooders past their own limit sharing IPs with
// ordinary callers who count in the IPs' cells), costs, modes, single
// checks, the front door and batches, every answer equals the answer of
// a world without the cache, for every algorithm of the closed cell.
func TestDenials_OpenFixedWindowCellsAreReadAfreshAndEveryAnswerEqualsRedis(t *testing.T) {
	t.Parallel()
	for ai, algo := range everyAlgorithm {
		t.Run(string(algo), func(t *testing.T) {
			t.Parallel()
			rig := newTwinRig(t, []rules.Rule{
				{Name: "per_user", Dimensions: []string{"user_id"}, Limit: 3, Window: rules.Duration(time.Minute), Algorithm: algo},
				{Name: "per_ip", Dimensions: []string{"ip"}, Limit: 60, Window: rules.Duration(2 * time.Minute), Algorithm: rules.FixedWindow},
				{Name: "per_ip_app", Dimensions: []string{"ip", "app_id"}, Algorithm: rules.FixedWindow,
					Limits: []rules.Limit{{Limit: 40, Window: rules.Duration(time.Minute)}, {Limit: 90, Window: rules.Duration(5 * time.Minute)}}},
			})
			rng := rand.New(rand.NewPCG(uint64(ai), 53))
			ctx := context.Background()
			request := func() *limiter.Request {
				user := fmt.Sprint("u", rng.IntN(12))
				if rng.IntN(3) > 0 {
					user = fmt.Sprint("flooder", rng.IntN(3))
				}
				req := &limiter.Request{Dims: dims("app_id", fmt.Sprint("a", rng.IntN(2)), "ip", fmt.Sprint("i", rng.IntN(2)), "user_id", user), Cost: 1 + rng.Int64N(2)}
				if rng.IntN(10) == 0 {
					req.DryRun = true
				}
				return req
			}
			for step := range 2500 {
				var reqs []*limiter.Request
				for range 1 + rng.IntN(4) {
					reqs = append(reqs, request())
				}
				want, err := rig.truth.CheckBatch(ctx, reqs)
				if err != nil {
					t.Fatal(err)
				}
				got, err := checkEachWay(ctx, rig.cached, rng.IntN(3), reqs)
				if err != nil {
					t.Fatal(err)
				}
				for i := range reqs {
					if err := sameDecision(got[i], want[i]); err != nil {
						t.Fatalf("step %d, check %d of %d %+v at %s: %v", step, i, len(reqs), reqs[i], rig.clk.Now().Format(time.StampMilli), err)
					}
				}
				rig.clk.Advance(time.Duration(rng.Int64N(300)) * time.Millisecond)
			}
			if rig.denials.Peeks() < 300 {
				t.Fatalf("%d checks answered with their open cells read: the test does not exercise it", rig.denials.Peeks())
			}
			t.Logf("%s: %d answered from the cache, %d of them with their open cells read", algo, rig.denials.Hits()+rig.denials.Peeks(), rig.denials.Peeks())
		})
	}
}

// In a batch, a denial answered from the cache reads its open cell after
// the checks before it that count in that cell, and before those after
// it: each check is answered as if sent alone, in order. The front door
// leaves such a denial to the checker behind it (it needs Redis).
func TestDenials_ABatchReadsAnOpenCellAfterTheChecksBeforeIt(t *testing.T) {
	t.Parallel()
	rig := newTwinRig(t, []rules.Rule{
		{Name: "per_user", Dimensions: []string{"user_id"}, Limit: 1, Window: rules.Duration(time.Hour), Algorithm: rules.FixedWindow},
		{Name: "per_ip", Dimensions: []string{"ip"}, Limit: 100, Window: rules.Duration(time.Hour), Algorithm: rules.FixedWindow},
	})
	ctx := context.Background()
	flooder := &limiter.Request{Dims: dims("ip", "x", "user_id", "f"), Cost: 1}
	other := func(n int) *limiter.Request {
		return &limiter.Request{Dims: dims("ip", "x", "user_id", fmt.Sprint("u", n)), Cost: 1}
	}
	for range 2 { // the second is denied and cached, its IP cell open
		if _, err := rig.cached.Check(ctx, flooder); err != nil {
			t.Fatal(err)
		}
	}
	ipRemaining := func(d limiter.Decision) int64 { return d.Entries[1].Remaining }
	for _, tt := range []struct {
		name  string
		batch []*limiter.Request
		at    int   // the flooder's place
		want  int64 // its IP cell's remaining
	}{
		// The flooder's first check counted 1 in the IP cell.
		{"after one that counts", []*limiter.Request{other(1), flooder}, 1, 98},
		{"before one that counts", []*limiter.Request{flooder, other(2)}, 0, 98},
		{"between", []*limiter.Request{other(3), flooder, other(4)}, 1, 96},
	} {
		peeks := rig.denials.Peeks()
		ds, err := rig.cached.CheckBatch(ctx, tt.batch)
		if err != nil {
			t.Fatal(err)
		}
		if d := ds[tt.at]; d.Allowed || ipRemaining(d) != tt.want {
			t.Fatalf("%s: the flooder got %+v, want denied with %d left on its IP", tt.name, d, tt.want)
		}
		if tt.at == 0 && rig.denials.Peeks() != peeks+1 {
			t.Fatalf("%s: peeks %d → %d, want the flooder's IP cell read", tt.name, peeks, rig.denials.Peeks())
		}
	}
	var reached bool
	if _, err := rig.cached.DenialsFirst(checkerFunc(func() { reached = true })).Check(ctx, flooder); err != nil || !reached {
		t.Fatalf("the front door answered a denial whose IP cell must be read (%v)", err)
	}
}

// A denial cached while its IP cell still had room is cached again once a
// read finds that cell closed too: from then on the front door answers it
// without Redis, as if it had been cached closed from the start.
func TestDenials_ADenialWhoseReadCellsCloseIsAnsweredAtTheFrontDoor(t *testing.T) {
	t.Parallel()
	for _, way := range []struct {
		name string
		read func(ctx context.Context, l *limiter.Limiter, req *limiter.Request) error
	}{
		{"Check", func(ctx context.Context, l *limiter.Limiter, req *limiter.Request) error {
			_, err := l.Check(ctx, req)
			return err
		}},
		{"CheckBatch", func(ctx context.Context, l *limiter.Limiter, req *limiter.Request) error {
			_, err := l.CheckBatch(ctx, []*limiter.Request{req})
			return err
		}},
	} {
		t.Run(way.name, func(t *testing.T) {
			t.Parallel()
			rig := newTwinRig(t, []rules.Rule{
				{Name: "per_user", Dimensions: []string{"user_id"}, Limit: 1, Window: rules.Duration(time.Hour), Algorithm: rules.FixedWindow},
				{Name: "per_ip", Dimensions: []string{"ip"}, Limit: 3, Window: rules.Duration(time.Hour), Algorithm: rules.FixedWindow},
			})
			ctx := context.Background()
			user := func(u string) *limiter.Request {
				return &limiter.Request{Dims: dims("ip", "x", "user_id", u), Cost: 1}
			}
			for _, u := range []string{"f", "f", "u1", "u2"} { // f cached with its IP open; then the IP closes
				if _, err := rig.cached.Check(ctx, user(u)); err != nil {
					t.Fatal(err)
				}
			}
			if err := way.read(ctx, rig.cached, user("f")); err != nil {
				t.Fatal(err)
			}
			if rig.denials.Peeks() != 1 {
				t.Fatalf("peeks %d, want the IP read once", rig.denials.Peeks())
			}
			d, err := rig.cached.DenialsFirst(failChecker{t}).Check(ctx, user("f"))
			if err != nil || d.Allowed || len(d.Entries) != 2 || d.Entries[1].Remaining != 0 {
				t.Fatalf("at the front door: %+v %v", d, err)
			}
		})
	}
}
