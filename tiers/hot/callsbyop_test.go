package hot

import (
	"testing"

	"github.com/quota-platform/quota/tiers"
)

// Each op gets exactly the calls Plan made for it, in one pass: ops split
// over several calls, ops of one call, and the same op given twice (its
// two places are two ops, each with its own calls).
func TestCallsByOp_GivesEachOpItsOwnCalls(t *testing.T) {
	t.Parallel()
	a, b := &tiers.Op{}, &tiers.Op{}
	for _, tc := range []struct {
		name  string
		calls []Call
		want  []int // calls per op
	}{
		{"one call each", []Call{{Op: a, opAt: 0}, {Op: b, opAt: 1}}, []int{1, 1}},
		{"a split op between two", []Call{{Op: a, opAt: 0}, {Op: b, opAt: 1}, {Op: b, opAt: 1}, {Op: a, opAt: 2}}, []int{1, 2, 1}},
		{"the same op twice", []Call{{Op: a, opAt: 0}, {Op: a, opAt: 0}, {Op: a, opAt: 1}}, []int{2, 1}},
		{"no calls", nil, []int{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			by := CallsByOp(tc.calls, len(tc.want))
			at := 0
			for i, want := range tc.want {
				if len(by[i]) != want {
					t.Fatalf("op %d: %d calls, want %d", i, len(by[i]), want)
				}
				for _, c := range by[i] {
					if c.opAt != i || c.Op != tc.calls[at].Op {
						t.Fatalf("op %d got a call of op %d", i, c.opAt)
					}
					at++
				}
				if cap(by[i]) != len(by[i]) {
					t.Fatalf("op %d: room past its calls (%d), where an append would overwrite the next op's", i, cap(by[i]))
				}
			}
		})
	}
}
