package tiers_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/internal/testsupport/tiermodel"
	"github.com/quota-platform/quota/internal/testsupport/tierstest"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/cold"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/warm"
)

// The conformance suite: one table of cases, run against every tier's Store
// (hot on Redis keys, warm on Redis hashes, cold on two MariaDB shard
// databases), so that the three cannot drift apart in behaviour. Every case
// uses identities of its own, so cases run in parallel on shared stores.
// Time is injected: Store.Check takes `now`.

// The suite's cells (package tierstest, which every store's tests share).
type confCell = tierstest.Cell

var (
	confT0      = tierstest.T0
	newConfCell = tierstest.NewCell
	confOp      = tierstest.Op
)

// confEnv is one store under test.
type confEnv struct {
	// Mover is nil for hot: hot.Mover exports a window's count without the
	// activity samples a full record carries, so it cannot round-trip one
	// (moverCases); migrate's tests cover its moves.
	tierstest.Env
	cold *cold.Store // set for the cold tier
}

// want asserts one cell's outcome.
func want(t *testing.T, what string, o tiers.Outcome, allowed bool, remaining int64, reset time.Duration) {
	t.Helper()
	var retry time.Duration
	if !allowed {
		retry = reset
	}
	if o.Allowed != allowed || o.Remaining != remaining || o.ResetAfter != reset || o.RetryAfter != retry {
		t.Fatalf("%s: got allowed=%v remaining=%d reset=%s retry=%s, want allowed=%v remaining=%d reset=%s retry=%s",
			what, o.Allowed, o.Remaining, o.ResetAfter, o.RetryAfter, allowed, remaining, reset, retry)
	}
}

const hour = time.Hour

var confCases = []struct {
	name string
	fn   func(t *testing.T, e *confEnv, all []*confEnv)
}{
	{"exact_limit", func(t *testing.T, e *confEnv, _ []*confEnv) {
		c := newConfCell(5, hour)
		for i := range 8 {
			now := confT0.Add(time.Duration(i) * time.Millisecond)
			op := e.Check(t, now, 1, tiers.Enforce, c)
			reset := hour - 250*time.Millisecond - time.Duration(i)*time.Millisecond
			if i < 5 {
				want(t, fmt.Sprint("call ", i), op.Out[0], true, int64(4-i), reset)
			} else {
				want(t, fmt.Sprint("call ", i), op.Out[0], false, 0, reset)
			}
			if op.Committed != (i < 5) || op.Allowed() != (i < 5) {
				t.Fatalf("call %d: committed %v allowed %v", i, op.Committed, op.Allowed())
			}
		}
		if n := e.Count(t, confT0, c); n != 5 {
			t.Fatalf("count %d, want 5", n)
		}
	}},
	{"cost", func(t *testing.T, e *confEnv, _ []*confEnv) {
		c := newConfCell(10, hour)
		reset := hour - 250*time.Millisecond
		want(t, "4", e.Check(t, confT0, 4, tiers.Enforce, c).Out[0], true, 6, reset)
		want(t, "4 more", e.Check(t, confT0, 4, tiers.Enforce, c).Out[0], true, 2, reset)
		want(t, "4 over", e.Check(t, confT0, 4, tiers.Enforce, c).Out[0], false, 2, reset)
		want(t, "2 fits", e.Check(t, confT0, 2, tiers.Enforce, c).Out[0], true, 0, reset)
		big := newConfCell(10, hour)
		want(t, "cost over limit", e.Check(t, confT0, 11, tiers.Enforce, big).Out[0], false, 10, reset)
		if n := e.Count(t, confT0, big); n != 0 {
			t.Fatalf("a denied call counted %d", n)
		}
	}},
	{"dry_run", func(t *testing.T, e *confEnv, _ []*confEnv) {
		c := newConfCell(3, hour)
		reset := hour - 250*time.Millisecond
		op := e.Check(t, confT0, 1, tiers.DryRun, c)
		want(t, "dry run", op.Out[0], true, 2, reset)
		if op.Committed {
			t.Fatal("a dry run committed")
		}
		for range 3 {
			e.Check(t, confT0, 1, tiers.Enforce, c)
		}
		want(t, "dry run exhausted", e.Check(t, confT0, 1, tiers.DryRun, c).Out[0], false, 0, reset)
		want(t, "enforce exhausted", e.Check(t, confT0, 1, tiers.Enforce, c).Out[0], false, 0, reset)
		if n := e.Count(t, confT0, c); n != 3 {
			t.Fatalf("count %d, want 3", n)
		}
	}},
	{"report", func(t *testing.T, e *confEnv, _ []*confEnv) {
		c := newConfCell(2, hour)
		reset := hour - 250*time.Millisecond
		op := e.Check(t, confT0, 3, tiers.Report, c)
		want(t, "report over limit", op.Out[0], false, 0, reset)
		if !op.Allowed() || !op.Committed {
			t.Fatalf("report: allowed %v committed %v, want both", op.Allowed(), op.Committed)
		}
		want(t, "enforce after report", e.Check(t, confT0, 1, tiers.Enforce, c).Out[0], false, 0, reset)
		e.Check(t, confT0, 1, tiers.Report, c)
		if e.Mover != nil {
			if n := e.Count(t, confT0, c); n != 4 {
				t.Fatalf("count %d, want 4 (reports count past the limit)", n)
			}
		}
	}},
	{"shadow", func(t *testing.T, e *confEnv, _ []*confEnv) {
		sh := newConfCell(1, hour)
		sh.Shadow = true
		c := newConfCell(10, hour)
		reset := hour - 250*time.Millisecond
		for i := range 3 {
			op := e.Check(t, confT0, 1, tiers.Enforce, sh, c)
			if !op.Allowed() || !op.Committed {
				t.Fatalf("call %d: a shadow cell denied", i)
			}
			want(t, "shadow", op.Out[0], i == 0, 0, reset)
			want(t, "normal", op.Out[1], true, int64(9-i), reset)
		}
		if e.Mover != nil {
			if n := e.Count(t, confT0, sh); n != 3 {
				t.Fatalf("shadow count %d, want 3", n)
			}
		}
	}},
	{"refund", func(t *testing.T, e *confEnv, _ []*confEnv) {
		c := newConfCell(5, hour)
		reset := hour - 250*time.Millisecond
		want(t, "3", e.Check(t, confT0, 3, tiers.Enforce, c).Out[0], true, 2, reset)
		// The refund answers the state after it, as for a call not counted.
		want(t, "refund 2", e.Check(t, confT0, 2, tiers.Refund, c).Out[0], true, 4, reset)
		want(t, "4 fits again", e.Check(t, confT0, 4, tiers.Enforce, c).Out[0], true, 0, reset)
		if n := e.Count(t, confT0, c); n != 5 {
			t.Fatalf("count %d, want 5", n)
		}
	}},
	{"window_rollover", func(t *testing.T, e *confEnv, _ []*confEnv) {
		c := newConfCell(2, time.Minute)
		reset := time.Minute - 250*time.Millisecond
		e.Check(t, confT0, 1, tiers.Enforce, c)
		e.Check(t, confT0, 1, tiers.Enforce, c)
		want(t, "exhausted", e.Check(t, confT0, 1, tiers.Enforce, c).Out[0], false, 0, reset)
		late := confT0.Add(59700 * time.Millisecond) // 10:00:59.950
		want(t, "end of window", e.Check(t, late, 1, tiers.Enforce, c).Out[0], false, 0, 50*time.Millisecond)
		next := confT0.Add(time.Minute) // 10:01:00.250
		want(t, "next window", e.Check(t, next, 1, tiers.Enforce, c).Out[0], true, 1, reset)
		if n := e.Count(t, next, c); n != 1 {
			t.Fatalf("count in the new window %d, want 1", n)
		}
		skip := confT0.Add(3 * time.Minute) // several windows later
		want(t, "windows later", e.Check(t, skip, 2, tiers.Enforce, c).Out[0], true, 0, reset)
	}},
	{"all_or_nothing", func(t *testing.T, e *confEnv, _ []*confEnv) {
		a, b, c := newConfCell(5, hour), newConfCell(2, hour), newConfCell(10, time.Minute)
		if e.cold != nil {
			a, b, c = spreadShards(t, e.cold, a, b, c)
		}
		for i := range 2 {
			if op := e.Check(t, confT0, 1, tiers.Enforce, a, b, c); !op.Committed {
				t.Fatalf("call %d denied", i)
			}
		}
		op := e.Check(t, confT0, 1, tiers.Enforce, a, b, c)
		if op.Committed || op.Allowed() {
			t.Fatal("third call allowed past b's limit")
		}
		want(t, "a", op.Out[0], true, 3, hour-250*time.Millisecond)
		want(t, "b", op.Out[1], false, 0, hour-250*time.Millisecond)
		want(t, "c", op.Out[2], true, 8, time.Minute-250*time.Millisecond)
		for _, x := range []struct {
			c confCell
			n int64
		}{{a, 2}, {b, 2}, {c, 2}} {
			if n := e.Count(t, confT0, x.c); n != x.n {
				t.Fatalf("count %d, want %d: a denied check counted", n, x.n)
			}
		}
	}},
	{"batch_in_order", func(t *testing.T, e *confEnv, _ []*confEnv) {
		c, d := newConfCell(3, hour), newConfCell(100, hour)
		modes := []tiers.Mode{tiers.Enforce, tiers.DryRun, tiers.Enforce, tiers.Enforce, tiers.DryRun, tiers.Enforce, tiers.Report}
		var ops []*tiers.Op
		for _, m := range modes {
			ops = append(ops, confOp(confT0, 1, m, c, d))
		}
		if err := e.Store.Check(context.Background(), confT0, ops); err != nil {
			t.Fatal(err)
		}
		wantAllowed := []bool{true, true, true, true, false, false, true}
		for i, op := range ops {
			if op.Allowed() != wantAllowed[i] {
				t.Fatalf("op %d (%v): allowed %v, want %v", i, modes[i], op.Allowed(), wantAllowed[i])
			}
		}
		if n := e.Count(t, confT0, d); n != 4 {
			t.Fatalf("second cell count %d, want 4", n)
		}
	}},
	{"concurrency", func(t *testing.T, e *confEnv, _ []*confEnv) {
		const limit, goroutines, calls = 40, 32, 4
		c := newConfCell(limit, hour)
		big := newConfCell(1000, hour)
		if e.cold != nil {
			c, big = spreadShards2(t, e.cold, c, big)
		}
		var allowed atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, goroutines*calls)
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range calls {
					now := confT0.Add(time.Duration(g*calls+i) * time.Millisecond)
					op := confOp(now, 1, tiers.Enforce, c, big)
					if err := e.Store.Check(context.Background(), now, []*tiers.Op{op}); err != nil {
						errs <- err
						return
					}
					if op.Committed {
						allowed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("concurrent check: %v", err)
		}
		if n := allowed.Load(); n != limit {
			t.Fatalf("%d allowed, want exactly %d", n, limit)
		}
		now := confT0.Add(time.Second)
		if n := e.Count(t, now, c); n != limit {
			t.Fatalf("count %d, want %d", n, limit)
		}
		if n := e.Count(t, now, big); n != limit {
			t.Fatalf("second cell count %d, want %d (all or nothing)", n, limit)
		}
	}},
	{"model_differential", func(t *testing.T, e *confEnv, _ []*confEnv) {
		confDifferential(t, e, uint64(time.Now().UnixNano()), 150)
	}},
}

// moverCases run on the stores that move full records (confEnv.mover).
var moverCases = []struct {
	name string
	fn   func(t *testing.T, e *confEnv, all []*confEnv)
}{
	{"move_round_trip", func(t *testing.T, e *confEnv, all []*confEnv) {
		ctx := context.Background()
		for _, dst := range all {
			if dst.Mover == nil || dst == e {
				continue
			}
			c := newConfCell(10, hour)
			for i := range 7 {
				e.Check(t, confT0.Add(time.Duration(i)*time.Minute), 1, tiers.Enforce, c)
			}
			missing := newConfCell(10, hour)
			recs, err := e.Mover.Export(ctx, []tiers.Ref{missing.Ref(), c.Ref()})
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 1 || recs[0].Count != 7 || recs[0].Ref != c.Ref() || recs[0].Samples != 6 || recs[0].MeanInterval != 60 {
				t.Fatalf("export: %+v", recs)
			}
			// Copy, twice (idempotent), then an older copy (ignored).
			for range 2 {
				if err := dst.Mover.Import(ctx, recs); err != nil {
					t.Fatal(err)
				}
			}
			older := recs[0]
			older.Last -= 3600
			older.Count = 1
			if err := dst.Mover.Import(ctx, []tiers.Record{older}); err != nil {
				t.Fatal(err)
			}
			got, err := dst.Mover.Export(ctx, []tiers.Ref{c.Ref()})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0] != recs[0] {
				t.Fatalf("%s -> %s: imported %+v, exported %+v", e.Name, dst.Name, recs[0], got)
			}
			if err := e.Mover.Delete(ctx, []tiers.Ref{c.Ref(), missing.Ref()}); err != nil {
				t.Fatal(err)
			}
			if left, err := e.Mover.Export(ctx, []tiers.Ref{c.Ref()}); err != nil || len(left) != 0 {
				t.Fatalf("after delete: %v %v", left, err)
			}
			// The destination goes on from the moved count.
			now := confT0.Add(10 * time.Minute)
			reset := hour - 10*time.Minute - 250*time.Millisecond
			want(t, "after move", dst.Check(t, now, 3, tiers.Enforce, c).Out[0], true, 0, reset)
			want(t, "after move, full", dst.Check(t, now, 1, tiers.Enforce, c).Out[0], false, 0, reset)
			if err := dst.Mover.Delete(ctx, []tiers.Ref{c.Ref()}); err != nil {
				t.Fatal(err)
			}
		}
	}},
}

// spreadShards rerolls users until a, b and c do not all share a cold shard.
func spreadShards(t *testing.T, s *cold.Store, a, b, c confCell) (confCell, confCell, confCell) {
	for range 100 {
		ra, rb, rc := a.Ref(), b.Ref(), c.Ref()
		if sa := s.ShardOf(&ra); sa != s.ShardOf(&rb) || sa != s.ShardOf(&rc) {
			return a, b, c
		}
		b = newConfCell(b.Limit, b.Window)
	}
	t.Fatal("could not spread cells over shards")
	return a, b, c
}

func spreadShards2(t *testing.T, s *cold.Store, a, b confCell) (confCell, confCell) {
	a, b, _ = spreadShards(t, s, a, b, b)
	return a, b
}

// confDifferential runs a random sequence of ops over a few cells through
// the store and through tiermodel.FixedWindow (internal/testsupport/tiermodel, the reference the hot
// script is held to) and requires every answer to agree.
func confDifferential(t *testing.T, e *confEnv, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	var cells []confCell
	models := map[string]tiermodel.Model{}
	for range 3 {
		w := []time.Duration{time.Minute, 2 * time.Minute, hour}[rng.IntN(3)]
		c := newConfCell(int64(1+rng.IntN(8)), w)
		c.Shadow = rng.IntN(4) == 0
		cells = append(cells, c)
		m, err := tiermodel.New(rules.FixedWindow, c.Limit, c.Window)
		if err != nil {
			t.Fatal(err)
		}
		models[c.Rule] = m
	}
	now := confT0
	var log []string
	for step := range steps {
		now = now.Add(time.Duration(rng.IntN(20_000)) * time.Millisecond)
		var pick []confCell
		for _, c := range cells {
			if rng.IntN(3) > 0 {
				pick = append(pick, c)
			}
		}
		if len(pick) == 0 {
			pick = cells[:1]
		}
		mode := []tiers.Mode{tiers.Enforce, tiers.Enforce, tiers.Enforce, tiers.DryRun, tiers.Report}[rng.IntN(5)]
		cost := int64(1 + rng.IntN(3))
		op := e.Check(t, now, cost, mode, pick...)
		var mcs []tiermodel.Cell
		for _, c := range pick {
			mcs = append(mcs, tiermodel.Cell{Model: models[c.Rule], Shadow: c.Shadow})
		}
		wantOut, wantCommit := checkModels(now, cost, mode, mcs)
		log = append(log, fmt.Sprintf("step %d: +%s cost %d mode %d cells %d", step, now.Sub(confT0), cost, mode, len(pick)))
		for i := range wantOut {
			got := op.Out[i]
			got.Tier = tiers.Hot
			if got != wantOut[i] {
				t.Fatalf("seed %d: %s: cell %d: got %+v, model %+v\n%v", seed, e.Name, i, op.Out[i], wantOut[i], log)
			}
		}
		if op.Committed != wantCommit {
			t.Fatalf("seed %d: %s: committed %v, model %v\n%v", seed, e.Name, op.Committed, wantCommit, log)
		}
		// Now and then give a counted op back, as a split check would.
		if op.Committed && mode == tiers.Enforce && rng.IntN(6) == 0 {
			e.Check(t, now, cost, tiers.Refund, pick...)
			for _, c := range pick {
				models[c.Rule].(*tiermodel.FixedWindow).Commit(now.UnixMilli(), -cost)
			}
		}
	}
}

// conformanceEnvs builds the three stores on the test Redis and two fresh
// shard databases.
func conformanceEnvs(t *testing.T) []*confEnv {
	rdb, prefix := testenv.Redis(t)
	hot := hot.NewStore(rdb, hot.Options{Prefix: prefix + "h:"})
	// Few buckets, so the cells of the suite share hashes.
	warm := warm.NewStore(rdb, warm.Options{Prefix: prefix + "w:"})
	cold := cold.NewStore(testenv.MySQLShards(t, 2), cold.Options{})
	return []*confEnv{
		{Env: tierstest.Env{Name: "hot", Store: hot}},
		{Env: tierstest.Env{Name: "warm", Store: warm, Mover: warm}},
		{Env: tierstest.Env{Name: "cold", Store: cold, Mover: cold}, cold: cold},
	}
}

func TestConformance(t *testing.T) {
	envs := conformanceEnvs(t)
	for _, e := range envs {
		t.Run(e.Name, func(t *testing.T) {
			t.Parallel()
			cases := confCases
			if e.Mover != nil {
				cases = append(cases[:len(cases):len(cases)], moverCases...)
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.fn(t, e, envs)
				})
			}
		})
	}
}

// TestConformance_StoresAgreeOnOneSequence runs one random sequence through
// all three stores at once and requires identical answers from each.
func TestConformance_StoresAgreeOnOneSequence(t *testing.T) {
	envs := conformanceEnvs(t)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 11))
	cells := []confCell{newConfCell(4, time.Minute), newConfCell(9, hour), newConfCell(2, 2*time.Minute)}
	cells[2].Shadow = true
	now := confT0
	for step := range 120 {
		now = now.Add(time.Duration(rng.IntN(15_000)) * time.Millisecond)
		mode := []tiers.Mode{tiers.Enforce, tiers.Enforce, tiers.DryRun, tiers.Report}[rng.IntN(4)]
		cost := int64(1 + rng.IntN(2))
		pick := cells[:1+rng.IntN(3)]
		var first *tiers.Op
		for _, e := range envs {
			op := e.Check(t, now, cost, mode, pick...)
			for i := range op.Out {
				op.Out[i].Tier = ""
			}
			if first == nil {
				first = op
				continue
			}
			if fmt.Sprint(op.Out, op.Committed) != fmt.Sprint(first.Out, first.Committed) {
				t.Fatalf("seed %d step %d: %s answered %v %v, hot %v %v", seed, step, e.Name, op.Out, op.Committed, first.Out, first.Committed)
			}
		}
	}
}

// checkModels is tiermodel.CheckModels in the store's types: one Outcome
// per cell (Tier Hot) and whether the cost was counted (model_test.go's,
// for this external package).
func checkModels(now time.Time, cost int64, mode tiers.Mode, cells []tiermodel.Cell) ([]tiers.Outcome, bool) {
	outs, counted := tiermodel.CheckModels(now, cost, tiermodel.Mode(mode), cells)
	res := make([]tiers.Outcome, len(outs))
	for i, o := range outs {
		retry := o.Retry
		if o.Allowed {
			retry = 0
		}
		res[i] = tiers.Outcome{
			Allowed:    o.Allowed,
			Remaining:  max(o.Remaining, 0),
			ResetAfter: time.Duration(o.Reset) * time.Millisecond,
			RetryAfter: time.Duration(retry) * time.Millisecond,
			Tier:       tiers.Hot,
		}
	}
	return res, counted
}
