package migrate

import (
	"context"
	"testing"

	"github.com/quota-platform/quota/internal/testsupport/moveenv"
	"github.com/quota-platform/quota/tiers"
)

// The router reads a denied op's fixed-window cell alone (the denial
// cache's open cells) only where its hot script would read it: a hot
// cell's count is found, with the answer the script would give; a cell
// moved to warm or cold is left for a check, and found again once it is
// back in hot.
func TestRouter_PeekFixedFindsHotCellsOnlyWithTheScriptsAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hot, warm, cold := moveenv.NewCell(10), moveenv.NewCell(10), moveenv.NewCell(10)
	for range 3 {
		e.Check(t, tiers.Enforce, hot, warm, cold)
	}
	e.Place(t, tiers.Warm, warm)
	e.Place(t, tiers.Cold, cold)
	peek := func() []tiers.FixedPeek {
		now := e.Clock.Now()
		var peeks []tiers.FixedPeek
		for _, c := range []moveenv.Cell{hot, warm, cold} {
			op := &tiers.Op{Cost: 2, Mode: tiers.Enforce, Cells: []tiers.Cell{c.At(now)}, Out: make([]tiers.Outcome, 1)}
			peeks = append(peeks, tiers.FixedPeek{Op: op})
		}
		if err := e.Router.PeekFixed(context.Background(), now, peeks); err != nil {
			t.Fatal(err)
		}
		return peeks
	}
	peeks := peek()
	if !peeks[0].Found || peeks[1].Found || peeks[2].Found {
		t.Fatalf("found hot %v, warm %v, cold %v: want the hot cell only", peeks[0].Found, peeks[1].Found, peeks[2].Found)
	}
	// What the router answers the same op denied by another cell (a
	// closed one): nothing counted, remaining before the call.
	closed := moveenv.NewCell(1)
	e.Check(t, tiers.Enforce, closed)
	now := e.Clock.Now()
	denied := &tiers.Op{Cost: 2, Mode: tiers.Enforce, Cells: []tiers.Cell{hot.At(now), closed.At(now)}, Out: make([]tiers.Outcome, 2)}
	if err := e.Router.Check(context.Background(), now, []*tiers.Op{denied}); err != nil || denied.Allowed() {
		t.Fatalf("the op with a closed cell: %v, allowed %v", err, denied.Allowed())
	}
	if got := peeks[0].Op.Out[0]; got.Remaining != 7 || got.Tier != tiers.Hot || got != denied.Out[0] {
		t.Fatalf("hot cell read as %+v, want %+v with 7 left", got, denied.Out[0])
	}
	e.Move(t, tiers.Warm, tiers.Hot, warm)
	if peeks := peek(); !peeks[1].Found || peeks[1].Op.Out[0].Remaining != 7 {
		t.Fatalf("the cell back in hot: found %v, %+v", peeks[1].Found, peeks[1].Op.Out[0])
	}
}
