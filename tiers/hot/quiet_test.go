package hot

import (
	"testing"
	"time"

	"github.com/quota-platform/quota/tiers"
)

// A quiet cell's record of its count loses to any later copy of the cell's
// state in the same window, even one made by a mover whose clock is behind
// (a hot export's Last is its mover's now): a record a stopped quiet move
// left never wins over the cell's next move into cold. It is of the window
// States read, with the count read.
func TestQuietRecords_ACountLosesToAnyLaterCopyOfItsWindow(t *testing.T) {
	t.Parallel()
	c := newConfCell(10, time.Hour)
	ref := c.Ref()
	idx := confT0.UnixMilli() / time.Hour.Milliseconds()
	m := &Mover{Now: func() time.Time { return confT0.Add(40 * time.Minute) }}
	recs, err := m.QuietRecords([]tiers.Ref{ref}, []State{{Counting: true, Count: "7", Window: idx}})
	if err != nil {
		t.Fatal(err)
	}
	q := recs[0]
	if q.Count != 7 || q.Index() != idx {
		t.Fatalf("quiet record %+v: want count 7 of window %d", q, idx)
	}
	for _, behind := range []time.Duration{0, 10 * time.Second, 39 * time.Minute} {
		at := confT0.Add(40*time.Minute - behind)
		later, err := hotRecord(&ref, idx, false, at, "7")
		if err != nil {
			t.Fatal(err)
		}
		if !later.NewerThan(&q) {
			t.Errorf("a copy of the window made at %s (a clock %s behind) does not win over the quiet record", at.Format(time.TimeOnly), behind)
		}
	}
}
