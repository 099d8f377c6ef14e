package limiter

import (
	"testing"
	"time"

	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
)

// Every fixed-window cell the limiter makes, of a rule, a calendar window,
// a plan or an explicit counter, carries the id of its identity and window
// (the directory and the activity count take it instead of hashing it
// again), and a cell of another algorithm none.
func TestBuildOp_FixedCellsCarryTheirCellID(t *testing.T) {
	t.Parallel()
	cs, now, cases := buildOpFixture(t)
	fixedCells := map[string]int{"two fixed rules": 3, "plan and calendar": 1, "several limits": 0, "token bucket": 0, "counters": 2}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			op, _ := buildOp(cs, &c.req, now, time.UTC, false)
			fixed := 0
			for i, cell := range op.Cells {
				want := tiers.CellID{}
				if cell.Algorithm == rules.FixedWindow {
					want = tiers.CellIDOf(cell.Identity, cell.Window)
					fixed++
				}
				if cell.ID != want {
					t.Errorf("cell %d (%s, %s): id %x, want %x", i, cell.Algorithm, cell.Window, cell.ID, want)
				}
			}
			if want, ok := fixedCells[c.name]; !ok || fixed != want {
				t.Fatalf("%d fixed-window cells, want %d (case known: %v)", fixed, want, ok)
			}
		})
	}
}
