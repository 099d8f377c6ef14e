package routing

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/internal/testsupport/tierstest"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/warm"
)

// A tag whose bucket holds values of the previous form (written there as
// that version laid them out: the tag's first bucket, its header's warm
// flag) is read and counted exactly through the router and the mover's
// calls, and each value a check or a freeze writes is of the new form.
func TestWarm_BucketOfThePreviousFormIsCountedExactly(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	hot := hot.NewStore(rdb, hot.Options{Prefix: prefix})
	ws := warm.NewStore(rdb, warm.Options{Prefix: prefix})
	r := NewRouter(hot, ws, nil)
	ctx := context.Background()
	now := time.Unix(tierstest.RecT+60, 0)
	app := newConfCell(20, time.Hour).App
	cells := make([]confCell, len(tierstest.OldWarmValues))
	for i, c := range tierstest.OldWarmValues {
		cells[i] = newConfCell(20, time.Hour)
		cells[i].App = app // one tag, one bucket
		ref := tiers.Ref{Identity: cells[i].At(now).Identity, Window: time.Hour, Tag: tiers.TagOf(app)}
		base, field := ws.Location(&ref)
		if err := rdb.HSet(ctx, base+"w\x00\x00", field, c.Val).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.SetRange(ctx, ws.HeaderKey(&ref), 0, "\x01").Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range tierstest.OldWarmValues {
		op := confOp(now, 2, tiers.Enforce, cells[i])
		if c.Want.Moved {
			// Frozen by a move of the old version: not counted.
			if err := ws.Check(ctx, now, []*tiers.Op{op}); !errors.Is(err, tiers.ErrMoved) || op.Committed {
				t.Fatalf("%s: %v, %+v; want ErrMoved", c.Name, err, op.Out)
			}
			continue
		}
		if err := r.Check(ctx, now, []*tiers.Op{op}); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		used := c.Want.Count
		if c.Want.Last < tierstest.RecT {
			used = 0 // an earlier window's count
		}
		if !op.Committed || op.Out[0].Tier != tiers.Warm || op.Out[0].Remaining != 20-used-2 {
			t.Fatalf("%s: %+v, want ws, remaining %d", c.Name, op.Out, 20-used-2)
		}
	}
	refs := make([]tiers.Ref, len(cells))
	for i := range cells {
		cell := cells[i].At(now)
		refs[i] = tiers.RefOf(&cell)
	}
	frozen, err := ws.Freeze(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	raws, err := ws.DirRaw(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range tierstest.OldWarmValues {
		want := c.Want
		if !want.Moved {
			want.Count = 2
			if want.Last == tierstest.RecT {
				want.Count += c.Want.Count
			}
		}
		rec, ok := warm.IsRecord(raws[i])
		if !frozen[i] || !ok || !rec.Moved || rec.Count != want.Count {
			t.Errorf("%s: after the freeze %+v (%v), want count %d, moved", c.Name, rec, frozen[i], want.Count)
		}
		if c.Want.Moved {
			if raws[i] != c.Val {
				t.Errorf("%s: a record frozen already was rewritten: %q", c.Name, raws[i])
			}
		} else if raws[i][0] < 0x80 {
			t.Errorf("%s: still of the old form after two writes: %q", c.Name, raws[i])
		}
	}
}
