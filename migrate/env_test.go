package migrate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/faultpoint"
	"github.com/quota-platform/quota/internal/testsupport/moveenv"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/warm"
)

// env is the tiers of a test (moveenv.Env) and a mover over them.
type env struct {
	*moveenv.Env
	mover *Mover
}

// newEnv builds the three tiers (Redis prefix and two shard DBs of the
// test's own), a router and a mover.
func newEnv(t testing.TB) *env { e := moveenv.New(t); return withMover(e, newMover(e)) }

// newClusterEnv is newEnv on a Redis Cluster of three masters the test
// starts (its nodes in env.Nodes).
func newClusterEnv(t *testing.T) *env { e := moveenv.NewCluster(t); return withMover(e, newMover(e)) }

// withMover is e moving with m.
func withMover(e *moveenv.Env, m *Mover) *env {
	return &env{Env: moveenv.Moving(e, m.MoveCells, func(r Result) int { return len(r.Moved) }), mover: m}
}

// newMover is a mover of e's tiers, its journal and leases under e's
// prefix.
func newMover(e *moveenv.Env) *Mover {
	return &Mover{RDB: e.RDB, Prefix: e.Prefix, Hot: e.Hot, Warm: e.Warm, Cold: e.Cold, LeaseTTL: 5 * time.Second}
}

// ownJournal returns a copy of e whose mover keeps its journal and leases
// under a prefix of its own: parallel subtests that run Repair over a
// shared journal would otherwise roll forward (and lease, for a moment)
// each other's cells, and a move the test expects to make would find its
// cell leased and skip it.
func (e *env) ownJournal() *env {
	m := *e.mover
	m.Prefix += "j" + testenv.RandomHex(4) + ":"
	return withMover(e.Env, &m)
}

// checkBatch sends n ops over cells through the router in one Check, as
// quotad's coalescer batches concurrent checks.
func (e *env) checkBatch(t testing.TB, mode tiers.Mode, n int, cs ...moveenv.Cell) []*tiers.Op {
	t.Helper()
	now := e.Clock.Now()
	ops := make([]*tiers.Op, n)
	for i := range ops {
		ops[i] = &tiers.Op{Cost: 1, Mode: mode}
		for _, c := range cs {
			ops[i].Cells = append(ops[i].Cells, c.At(now))
		}
	}
	if err := e.Router.Check(context.Background(), now, ops); err != nil {
		t.Errorf("check: %v", err)
		return nil
	}
	return ops
}

// takeFullProtocol puts cells in their tags' cold filters, as cells moved
// out of cold before are: a move of them hot>cold then takes the full
// protocol, not the quiet move (PROTOCOL.md, "Quiet cells").
func (e *env) takeFullProtocol(t testing.TB, cs ...moveenv.Cell) {
	t.Helper()
	refs := moveenv.Refs(cs...)
	swaps := make([]warm.DirSwap, len(refs))
	for i := range refs {
		swaps[i].Ref = refs[i]
	}
	ok, err := e.Warm.SwitchToCold(context.Background(), swaps, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range ok {
		if !b {
			t.Fatalf("cell %d not put in its cold filter", i)
		}
	}
}

// expectCell fails t unless c is in tier with count n, and exactly
// limit-n of 10 more checks are allowed (the cell is routable and exact).
func (e *env) expectCell(t *testing.T, when string, c moveenv.Cell, tier tiers.Tier, n int64) {
	t.Helper()
	if got := e.TierOf(t, c); got != tier {
		t.Fatalf("%s: tier %q, want %q", when, got, tier)
	}
	if got := e.Count(t, c); got != n {
		t.Fatalf("%s: count %d, want %d", when, got, n)
	}
	allowed := int64(0)
	for range 10 {
		if op := e.Check(t, tiers.Enforce, c); op != nil && op.Allowed() {
			allowed++
		}
	}
	if want := min(10, c.Limit-n); allowed != want {
		t.Fatalf("%s: %d more allowed, want %d", when, allowed, want)
	}
}

// crashingMover is a copy of e's mover that stops after step as a crash
// would (its leases left to lapse after leaseTTL).
func (e *env) crashingMover(step Step, leaseTTL time.Duration) *Mover {
	m := *e.mover
	m.LeaseTTL = leaseTTL
	m.Faults = afterStep(func(s Step) error {
		if s == step {
			return errors.New("crash")
		}
		return nil
	})
	return &m
}

// afterStep is fault points that run fn after each step of a move; an
// error stops the move there, as a crash would.
func afterStep(fn func(Step) error) faultpoint.Points {
	return &faultpoint.Funcs{MoveStep: func(s int) error { return fn(Step(s)) }}
}
