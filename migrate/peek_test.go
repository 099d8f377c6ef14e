package migrate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testsupport/moveenv"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/routing"
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

// On a Redis Cluster the breaker reads each master's peeks through that
// master's circuit: cells of many apps (slots on every master) are all
// found, each with its own count, and a master whose circuit is open
// leaves its cells for a check while the others are still read.
func TestBreaker_PeekFixedOnAClusterReadsEachMasterThroughItsCircuit(t *testing.T) {
	t.Parallel()
	e := newClusterEnv(t)
	cc := e.RDB.(*redis.ClusterClient)
	cells := moveenv.NewCells(30, 10, 0)
	for i, c := range cells {
		for range 1 + i%3 {
			e.Check(t, tiers.Enforce, c)
		}
	}
	var down string // the master whose circuit is opened below
	breaker := routing.NewBreaker(e.Router, e.Clock, 1, time.Hour).WithPartitions(routing.ClusterPartition(cc),
		func(context.Context, string) error { return errors.New("still down") }, time.Second)
	peek := func() []tiers.FixedPeek {
		now := e.Clock.Now()
		peeks := make([]tiers.FixedPeek, len(cells))
		for i, c := range cells {
			peeks[i].Op = &tiers.Op{Cost: 1, Mode: tiers.Enforce, Cells: []tiers.Cell{c.At(now)}, Out: make([]tiers.Outcome, 1)}
		}
		if err := breaker.PeekFixed(context.Background(), now, peeks); err != nil {
			t.Fatal(err)
		}
		return peeks
	}
	for i, p := range peek() {
		if want := int64(10 - 1 - i%3); !p.Found || p.Op.Out[0].Remaining != want {
			t.Fatalf("cell %d: found %v, %+v, want %d left", i, p.Found, p.Op.Out[0], want)
		}
	}
	// Open one master's circuit: a failed call through it.
	first := tiers.Op{Cells: []tiers.Cell{cells[0].At(e.Clock.Now())}}
	down = routing.ClusterPartition(cc)(context.Background(), &first)
	for _, n := range e.Nodes {
		if n.Addr() == down {
			n.Kill()
		}
	}
	if err := breaker.Check(context.Background(), e.Clock.Now(), []*tiers.Op{&first}); err == nil {
		t.Fatalf("a check on the killed master %s answered", down)
	}
	var found, missed int
	for i, p := range peek() {
		op := tiers.Op{Cells: p.Op.Cells}
		switch on := routing.ClusterPartition(cc)(context.Background(), &op); {
		case on == down && p.Found:
			t.Fatalf("cell %d on the open master %s was read", i, down)
		case on != down && !p.Found:
			t.Fatalf("cell %d on %s was not read while %s was open", i, on, down)
		case p.Found:
			found++
		default:
			missed++
		}
	}
	if found == 0 || missed == 0 {
		t.Fatalf("%d read, %d left: the cells do not span the open master and the others", found, missed)
	}
}
