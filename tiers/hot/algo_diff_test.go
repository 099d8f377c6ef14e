package hot

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/internal/testsupport/tiermodel"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
)

// The differential test: random call sequences run through HotStore.Check
// (the Lua script on the real Redis, under an injected clock) and through
// the Go reference models (internal/testsupport/tiermodel). Every field of every answer must be
// equal: allowed, remaining, reset_after and retry_after of every cell, and
// whether the op counted. All of them are exact (integer milliseconds).

type diffRule struct {
	name   string
	algo   rules.Algorithm
	shadow bool
	limits []rules.Limit
	tag    tiers.Tag
}

type diffScenario struct {
	seed   uint64
	rules  []diffRule
	ids    []string
	models map[string]tiermodel.Model // rule|identity|window -> model
	log    []string                   // what happened, for a failure message
}

var diffAlgos = []rules.Algorithm{rules.FixedWindow, rules.SlidingWindow, rules.TokenBucket, rules.SlidingLog, rules.MinInterval}

var shortWindows = []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 10 * time.Second, time.Minute, 90 * time.Second, 10 * time.Minute}
var longWindows = []time.Duration{time.Minute, time.Hour, 3 * time.Hour, 24 * time.Hour, 48 * time.Hour, 7 * 24 * time.Hour}

// newDiffScenario makes a random scenario: 1-3 rules (of algorithm only,
// when given), each with 1-3 limits, some shadow, and 1-3 identities. With
// exactRefunds, only the algorithms whose refund is exact for a shadow
// cell counted over its limit may be shadow (see README: refund).
func newDiffScenario(seed uint64, only rules.Algorithm, exactRefunds bool) *diffScenario {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	sc := &diffScenario{seed: seed, models: map[string]tiermodel.Model{}}
	windows := shortWindows
	if rng.IntN(3) == 0 {
		windows = longWindows
	}
	nRules := 1 + rng.IntN(3)
	for r := range nRules {
		algo := only
		if algo == "" {
			algo = diffAlgos[rng.IntN(len(diffAlgos))]
		}
		dr := diffRule{
			name:   fmt.Sprintf("r%d_%s", r, algo),
			algo:   algo,
			shadow: rng.IntN(6) == 0,
		}
		if exactRefunds && (algo == rules.TokenBucket || algo == rules.SlidingLog) {
			dr.shadow = false
		}
		dr.tag = tiers.TagOf(dr.name)
		nLimits := 1 + rng.IntN(3)
		perm := rng.Perm(len(windows))
		for _, wi := range perm[:nLimits] {
			w := windows[wi]
			limit := int64(1 + rng.IntN(12))
			if rng.IntN(4) == 0 {
				limit = int64(1 + rng.IntN(60))
			}
			if algo == rules.MinInterval {
				limit = min(limit, w.Milliseconds())
			}
			dr.limits = append(dr.limits, rules.Limit{Limit: limit, Window: rules.Duration(w)})
		}
		sc.rules = append(sc.rules, dr)
	}
	for i := range 1 + rng.IntN(3) {
		sc.ids = append(sc.ids, fmt.Sprintf("%d/id%d", seed, i)) // keys of their own
	}
	return sc
}

// op builds the store op and the model cells of one call by identity id.
func (sc *diffScenario) op(id string, now time.Time, cost int64, mode tiers.Mode) (*tiers.Op, []tiermodel.Cell) {
	op := &tiers.Op{Cost: cost, Mode: mode}
	var mcs []tiermodel.Cell
	for _, r := range sc.rules {
		for _, l := range r.limits {
			w := time.Duration(l.Window)
			var index int64
			if r.algo == rules.FixedWindow {
				index = now.UnixMilli() / w.Milliseconds()
			}
			vals := []string{id}
			op.Cells = append(op.Cells, tiers.Cell{
				Algorithm: r.algo, Limit: l.Limit, Window: w, Shadow: r.shadow,
				Identity: tiers.IdentityOf(r.name, vals),
				Key:      tiers.CounterKeyOf(r.name, vals, int64(w/time.Second), index),
				Tag:      r.tag,
			})
			mk := r.name + "|" + id + "|" + w.String()
			m := sc.models[mk]
			if m == nil {
				var err error
				if m, err = tiermodel.New(r.algo, l.Limit, w); err != nil {
					panic(err)
				}
				sc.models[mk] = m
			}
			mcs = append(mcs, tiermodel.Cell{Model: m, Shadow: r.shadow})
		}
	}
	return op, mcs
}

func (sc *diffScenario) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d\n", sc.seed)
	for _, r := range sc.rules {
		fmt.Fprintf(&b, "rule %s shadow=%v limits=%v\n", r.name, r.shadow, r.limits)
	}
	for _, l := range sc.log {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

var modeNames = map[tiers.Mode]string{tiers.Enforce: "enforce", tiers.DryRun: "dry_run", tiers.Report: "report"}

// runDiffScenario plays one scenario; it returns an error describing the
// first disagreement. Simulated time never runs slower than real time, so a
// key's real TTL never ends before its simulated one would (keys then stay
// at most longer than needed, which the algorithms treat alike).
// diffStats counts what the scenarios exercised, per algorithm: cells
// decided, cells that denied, and denied cells with a retry to compare.
type diffStats struct {
	mu                      sync.Mutex
	ops, committed          int
	cells, denied, retrying map[rules.Algorithm]int
}

func (st *diffStats) add(op *tiers.Op) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ops++
	if op.Committed {
		st.committed++
	}
	for i, c := range op.Cells {
		st.cells[c.Algorithm]++
		if !op.Out[i].Allowed {
			st.denied[c.Algorithm]++
			if op.Out[i].RetryAfter > 0 {
				st.retrying[c.Algorithm]++
			}
		}
	}
}

func runDiffScenario(ctx context.Context, s *Store, sc *diffScenario, steps int, split bool, st *diffStats) error {
	rng := rand.New(rand.NewPCG(sc.seed+1, 7))
	realStart := time.Now()
	simBase := realStart.UnixMilli() + rng.Int64N(400*24*3600*1000)
	var offset int64
	minW, maxW := int64(1<<62), int64(0)
	// Clocks of several servers disagree a little: now may step back a few
	// ms. The sliding window model keeps whole seconds in order, so
	// scenarios with a sliding window keep time monotone; so do split ones:
	// a token bucket refunded at now stays refilled up to now, which a check
	// stamped a few ms earlier sees (refund is exact under one clock).
	skew := !split
	for _, r := range sc.rules {
		if r.algo == rules.SlidingWindow {
			skew = false
		}
	}
	for _, r := range sc.rules {
		for _, l := range r.limits {
			w := time.Duration(l.Window).Milliseconds()
			minW, maxW = min(minW, w), max(maxW, w)
		}
	}
	for step := range steps {
		switch p := rng.IntN(100); {
		case p < 35: // same instant (plus the real time that passed)
		case p < 55:
			offset += rng.Int64N(1000)
		case p < 80:
			offset += rng.Int64N(minW + 1)
		case p < 95:
			offset += rng.Int64N(maxW + 1)
		default:
			offset += maxW + rng.Int64N(maxW+1)
		}
		nowMs := simBase + time.Since(realStart).Milliseconds() + offset
		if skew && rng.IntN(8) == 0 {
			// a server whose clock is a little behind the others
			nowMs -= rng.Int64N(51)
		}
		now := time.UnixMilli(nowMs)
		batch := 1 + rng.IntN(3)
		ops := make([]*tiers.Op, batch)
		models := make([][]tiermodel.Cell, batch)
		for i := range ops {
			mode := tiers.Enforce
			switch p := rng.IntN(100); {
			case p < 14:
				mode = tiers.DryRun
			case p < 28:
				mode = tiers.Report
			}
			cost := int64(1 + rng.IntN(5))
			if rng.IntN(8) == 0 {
				cost = 1
			}
			id := sc.ids[rng.IntN(len(sc.ids))]
			ops[i], models[i] = sc.op(id, now, cost, mode)
			sc.log = append(sc.log, fmt.Sprintf("step %d op %d: now=%d id=%s cost=%d mode=%s", step, i, now.UnixMilli(), id, cost, modeNames[mode]))
		}
		if err := s.Check(ctx, now, ops); err != nil {
			return fmt.Errorf("check: %w", err)
		}
		for i, op := range ops {
			want, committed := checkModels(now, op.Cost, op.Mode, models[i])
			// A split dry run reports, in a part that allows while another
			// part denies, what that part would have left: compare decisions only.
			decisionsOnly := split && op.Mode == tiers.DryRun && !allAllowed(want, models[i])
			for j := range want {
				got := op.Out[j]
				if decisionsOnly {
					got.Remaining, got.ResetAfter, got.RetryAfter = want[j].Remaining, want[j].ResetAfter, want[j].RetryAfter
				}
				if got != want[j] {
					c := op.Cells[j]
					return fmt.Errorf("step %d op %d cell %d (%s limit %d window %s shadow %v):\n redis %+v\n model %+v",
						step, i, j, c.Algorithm, c.Limit, c.Window, c.Shadow, got, want[j])
				}
			}
			if op.Committed != committed {
				return fmt.Errorf("step %d op %d: redis committed=%v, model %v", step, i, op.Committed, committed)
			}
			st.add(op)
		}
	}
	return nil
}

func allAllowed(out []tiers.Outcome, cells []tiermodel.Cell) bool {
	for i := range out {
		if !out[i].Allowed && !cells[i].Shadow {
			return false
		}
	}
	return true
}

// runDiff plays n scenarios on a few workers.
func runDiff(t *testing.T, n, steps int, split bool, only rules.Algorithm) {
	rdb, prefix := testenv.Redis(t)
	s := NewStore(rdb, Options{Prefix: prefix, Jitter: 10 * time.Minute, SplitBySlot: split})
	ctx := context.Background()
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	base := rand.Uint64()
	t.Logf("base seed %d", base)
	st := &diffStats{cells: map[rules.Algorithm]int{}, denied: map[rules.Algorithm]int{}, retrying: map[rules.Algorithm]int{}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	failures := 0
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				sc := newDiffScenario(base+uint64(i), only, split)
				if err := runDiffScenario(ctx, s, sc, steps, split, st); err != nil {
					mu.Lock()
					failures++
					if failures <= 3 {
						t.Errorf("scenario %d: %v\n%s", i, err, sc.describe())
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if failures > 0 {
		t.Errorf("%d of %d scenarios disagreed", failures, n)
	}
	t.Logf("%d scenarios, %d ops (%d counted)", n, st.ops, st.committed)
	for _, a := range diffAlgos {
		if st.cells[a] > 0 {
			t.Logf("  %-15s %6d cells, %6d denied, %6d with a retry", a, st.cells[a], st.denied[a], st.retrying[a])
		}
	}
}

func TestAlgoDiff_RandomSequencesAgreeWithModels(t *testing.T) {
	t.Parallel()
	n := 500
	if testing.Short() {
		n = 100
	}
	runDiff(t, n, 30, false, "")
}

// Each algorithm alone, so every one gets thousands of calls with only its
// own decisions in play.
func TestAlgoDiff_EachAlgorithmAlone(t *testing.T) {
	t.Parallel()
	for _, a := range diffAlgos {
		t.Run(string(a), func(t *testing.T) {
			t.Parallel()
			n := 100
			if testing.Short() {
				n = 30
			}
			runDiff(t, n, 30, false, a)
		})
	}
}

// Split by slot (as on a Redis Cluster): each rule's cells are their own
// script call, and a denied op refunds the parts that counted. The answers
// and the state after the refund must still be those of the all-or-nothing
// model. (Refund is best effort for a shadow token_bucket or sliding_log
// cell that was counted over its limit - debt past one bucket, overwritten
// log entries - so those are not made shadow here.)
func TestAlgoDiff_SplitChecksRefundToTheModel(t *testing.T) {
	t.Parallel()
	n := 120
	if testing.Short() {
		n = 40
	}
	runDiff(t, n, 40, true, "")
}
