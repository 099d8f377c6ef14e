package routing

import (
	"testing"
	"time"

	"github.com/quota-platform/quota/tiers"
)

// Router.Calls hears which cells a call created the hot key of: the
// activity count appends those without a lookup (migrate/activity).
func TestRouter_CallsSaysWhichCellsTheCallCreated(t *testing.T) {
	t.Parallel()
	r, _ := newGroupRouter(t)
	type heard struct {
		cells   int
		created uint64
	}
	var got []heard
	r.Calls = func(cells []tiers.Cell, created uint64) { got = append(got, heard{len(cells), created}) }
	a, b, short := newConfCell(5, time.Hour), newConfCell(5, time.Hour), newConfCell(5, time.Minute)
	r.CallsMinWindow = time.Hour
	cold := newConfCell(5, time.Hour)
	makeCold(t, r, cold)
	tests := []struct {
		name string
		op   *tiers.Op
		want heard
	}{
		{"a new cell", confOp(confT0, 1, tiers.Enforce, a), heard{1, 0b1}},
		{"its second call", confOp(confT0, 1, tiers.Enforce, a), heard{1, 0}},
		{"a counted cell and a new one", confOp(confT0, 2, tiers.Enforce, a, b), heard{2, 0b10}},
		// The short window is not reported: b is then the first cell heard.
		{"after a cell left out", confOp(confT0, 1, tiers.Enforce, short, newConfCell(5, time.Hour)), heard{1, 0b1}},
		{"a dry run counts nothing", confOp(confT0, 1, tiers.DryRun, newConfCell(5, time.Hour)), heard{1, 0}},
		{"a denied call counts nothing", confOp(confT0, 6, tiers.Enforce, newConfCell(5, time.Hour)), heard{1, 0}},
		{"a cold cell has no hot key", confOp(confT0, 1, tiers.Enforce, cold, newConfCell(5, time.Hour)), heard{2, 0b10}},
	}
	for _, tt := range tests { // in order: each builds on the counts before it
		got = got[:0]
		routerCheck(t, r, tt.op)
		if len(got) != 1 || got[0] != tt.want {
			t.Fatalf("%s: Calls heard %+v, want once %+v", tt.name, got, tt.want)
		}
	}
}
