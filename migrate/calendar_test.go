package migrate

import (
	"context"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/moveenv"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
)

// calendarCells are cells of a month quota in Asia/Shanghai as the limiter
// makes them: the period handed to the tiers as the fixed window [0, end).
func calendarCells(t *testing.T, e *env, n int, limit int64) ([]moveenv.Cell, time.Time) {
	t.Helper()
	loc, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	_, end := rules.Month.Period(e.Clock.Now(), loc)
	cells := moveenv.NewCells(n, limit, 0)
	for i := range cells {
		cells[i].Window = time.Duration(end.Unix()) * time.Second
	}
	return cells, end
}

// A calendar period's cells move through every tier like any fixed
// window's, by the full protocol and by the quiet move (idle and counted):
// counts intact, and each tier answers the period's exact reset.
func TestMoveKeepsCount_CalendarPeriods(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cells, end := calendarCells(t, e, 3, 50)
	c := cells[0]
	want := int64(0)
	from := tiers.Hot
	for _, to := range []tiers.Tier{tiers.Warm, tiers.Cold, tiers.Hot, tiers.Cold, tiers.Warm, tiers.Hot} {
		for range 3 {
			op := e.Check(t, tiers.Enforce, c)
			want++
			if got, reset := op.Out[0].Tier, op.Out[0].ResetAfter; got != from || reset != end.Sub(e.Clock.Now()) {
				t.Fatalf("in %s: outcome tier %s, reset %s; want the period's end, %s", from, got, reset, end.Sub(e.Clock.Now()))
			}
		}
		e.Move(t, from, to, c)
		if n := e.Count(t, c); n != want {
			t.Fatalf("%s>%s: count %d, want %d", from, to, n, want)
		}
		from = to
	}
	// The quiet move: an idle cell and a counted one go cold as they are.
	e.Check(t, tiers.Enforce, cells[2])
	res, err := e.mover.MoveCells(context.Background(), moveenv.Refs(cells[1:]...), tiers.Hot, tiers.Cold)
	if err != nil || len(res.Moved) != 2 {
		t.Fatalf("quiet move: %+v %v", res, err)
	}
	e.expectCell(t, "idle, after its quiet move", cells[1], tiers.Cold, 0)
	e.expectCell(t, "counted, after its quiet move", cells[2], tiers.Cold, 1)
}
