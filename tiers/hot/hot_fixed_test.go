package hot

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/warm"
)

// The fast path's answers are held to the models by the differential and
// conformance tests (every fixed-window-only scenario goes through it);
// these tests pin down when it is taken and that it survives Redis losing
// its scripts.

// scriptsCached reports whether Redis holds each of s's two scripts.
func scriptsCached(t *testing.T, rdb *redis.Client, s *Store) (general, fixed bool) {
	t.Helper()
	got, err := rdb.ScriptExists(context.Background(), s.script.Hash(), s.fixed.Hash()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return got[0], got[1]
}

// newPrivateHot is a hot store on a redis-server of the test's own, whose
// scripts the test may flush.
func newPrivateHot(t *testing.T) (*redis.Client, *Store) {
	p := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return rdb, NewStore(rdb, Options{Prefix: "h:"})
}

func TestHot_FixedWindowOnlyChecksGoToTheFixedScript(t *testing.T) {
	t.Parallel()
	rdb, s := newPrivateHot(t)
	ctx := context.Background()
	a, b := newConfCell(5, time.Hour), newConfCell(5, time.Minute)

	// Two fixed-window cells, one op and two ops (a pipeline), every mode
	// but refund: only hot_fixed.lua is ever loaded.
	for _, mode := range []tiers.Mode{tiers.Enforce, tiers.DryRun, tiers.Report} {
		if err := s.Check(ctx, confT0, []*tiers.Op{confOp(confT0, 1, mode, a, b)}); err != nil {
			t.Fatal(err)
		}
		if err := s.Check(ctx, confT0, []*tiers.Op{confOp(confT0, 1, mode, a), confOp(confT0, 1, mode, b)}); err != nil {
			t.Fatal(err)
		}
	}
	if general, fixed := scriptsCached(t, rdb, s); general || !fixed {
		t.Fatalf("after fixed-window checks: general script cached %v, fixed %v; want only the fixed one", general, fixed)
	}

	// So do they with the directory of a Router's hot store (tiering on),
	// whose cells are all new here: counted in hot, as without it.
	rdb.ScriptFlush(ctx)
	withDir := *s
	withDir.dir = warm.NewStore(rdb, warm.Options{Prefix: "w:"})
	op := confOp(confT0, 1, tiers.Enforce, newConfCell(5, time.Hour), newConfCell(5, time.Minute))
	if err := withDir.Check(ctx, confT0, []*tiers.Op{op}); err != nil {
		t.Fatal(err)
	}
	if op.Route != nil || !op.Committed || op.Out[0].Remaining != 4 || op.Out[1].Remaining != 4 {
		t.Fatalf("new cells with the directory: route %v, committed %v, %+v; want both counted in hot", op.Route, op.Committed, op.Out)
	}
	if general, fixed := scriptsCached(t, rdb, s); general || !fixed {
		t.Fatalf("after a check with the directory: general script cached %v, fixed %v; want only the fixed one", general, fixed)
	}

	// A token bucket cell among them takes the general script.
	rdb.ScriptFlush(ctx)
	mixed := confOp(confT0, 1, tiers.Enforce, a, newConfCell(5, time.Hour))
	mixed.Cells[1].Algorithm = rules.TokenBucket
	if err := s.Check(ctx, confT0, []*tiers.Op{mixed}); err != nil {
		t.Fatal(err)
	}
	if general, fixed := scriptsCached(t, rdb, s); !general || fixed {
		t.Fatalf("after a mixed check: general script cached %v, fixed %v; want only the general one", general, fixed)
	}
}

// Redis forgets scripts on a restart or SCRIPT FLUSH: the single-call path
// (EVALSHA, then EVAL on NOSCRIPT) and the pipelined path (load, then send
// again) both recover, for each script, and count exactly.
func TestHot_EachScriptSurvivesAScriptFlush(t *testing.T) {
	t.Parallel()
	rdb, s := newPrivateHot(t)
	ctx := context.Background()
	for _, algo := range []rules.Algorithm{rules.FixedWindow, rules.TokenBucket} {
		a, b := newConfCell(3, time.Hour), newConfCell(3, time.Hour)
		op := func(c confCell) *tiers.Op {
			o := confOp(confT0, 1, tiers.Enforce, c)
			o.Cells[0].Algorithm = algo
			return o
		}
		for i := range 4 {
			rdb.ScriptFlush(ctx)
			single := []*tiers.Op{op(a)}
			if err := s.Check(ctx, confT0, single); err != nil {
				t.Fatalf("%s single, round %d: %v", algo, i, err)
			}
			rdb.ScriptFlush(ctx)
			piped := []*tiers.Op{op(b), op(b)}
			if err := s.Check(ctx, confT0, piped); err != nil {
				t.Fatalf("%s pipelined, round %d: %v", algo, i, err)
			}
			if single[0].Committed != (i < 3) {
				t.Errorf("%s single, round %d: committed %v", algo, i, single[0].Committed)
			}
			// b takes two a round: calls 1-3 fit its limit of 3, 4-8 do not.
			if piped[0].Committed != (2*i < 3) || piped[1].Committed != (2*i+1 < 3) {
				t.Errorf("%s pipelined, round %d: committed %v %v", algo, i, piped[0].Committed, piped[1].Committed)
			}
		}
	}
}

// Checks of fixed-window cells share hot_fixed.lua's calls, up to
// fixedPerCall a call: each is still decided in order as if sent alone
// (its mode, the counts before it), a check of another algorithm among
// them is sent on its own between two such calls, and the counter ends
// at what the checks counted.
func TestHot_ChecksSharingAScriptCallAreDecidedInOrderAsIfAlone(t *testing.T) {
	t.Parallel()
	rdb, s := newPrivateHot(t)
	ctx := context.Background()
	const limit, n, other = 50, 70, 35
	a, b := newConfCell(limit, time.Hour), newConfCell(limit, time.Hour)
	modes := make([]tiers.Mode, n)
	ops := make([]*tiers.Op, n)
	for i := range ops {
		switch {
		case i%7 == 3:
			modes[i] = tiers.DryRun
		case i%11 == 5:
			modes[i] = tiers.Report
		}
		ops[i] = confOp(confT0, 1, modes[i], a)
	}
	ops[other] = confOp(confT0, 1, tiers.Enforce, b)
	ops[other].Cells[0].Algorithm = rules.TokenBucket
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx, confT0, ops); err != nil {
		t.Fatal(err)
	}

	var used int64
	for i, op := range ops {
		if i == other {
			continue
		}
		allowed := used+1 <= limit
		counted := modes[i] == tiers.Report || (modes[i] == tiers.Enforce && allowed)
		if counted {
			used++
		}
		wantRemaining := limit - used
		if modes[i] == tiers.DryRun && allowed {
			wantRemaining-- // what the call would leave
		}
		wantRemaining = max(wantRemaining, 0)
		got := op.Out[0]
		if op.Committed != counted || got.Allowed != allowed || got.Remaining != wantRemaining {
			t.Errorf("check %d (mode %d): committed %v, allowed %v, remaining %d; want allowed %v, remaining %d",
				i, modes[i], op.Committed, got.Allowed, got.Remaining, allowed, wantRemaining)
		}
	}
	if !ops[other].Committed || ops[other].Out[0].Remaining != limit-1 {
		t.Errorf("the token bucket check among them: committed %v, %+v", ops[other].Committed, ops[other].Out[0])
	}
	if v, err := rdb.Get(ctx, s.Key(&ops[0].Cells[0])).Int64(); err != nil || v != used {
		t.Errorf("counter %d (%v), want %d", v, err, used)
	}
	// 35 fixed checks (32 + 3), the token bucket's, 34 (32 + 2): 5 calls.
	stats, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stats, "cmdstat_evalsha:calls=5,") {
		t.Errorf("want 5 script calls for %d checks; Redis says:\n%s", n, stats)
	}
}
