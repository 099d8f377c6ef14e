package tiers

import (
	"testing"
	"time"
)

// A record that has seen no call (a move's empty copy) observes no
// interval at its first call: the time since it was made is not one.
func TestRecord_AnEmptyCopyObservesNoIntervalAtItsFirstCall(t *testing.T) {
	t.Parallel()
	ref := Ref{Window: time.Hour}
	s := &RecState{Rec: Record{Ref: ref, Last: recT - 3*3600, First: recT - 3*3600}, Present: true}
	s.count(&ref, 3600, recT+10, 1)
	if s.Rec.Samples != 0 || s.Rec.MeanInterval != 0 || s.Rec.Count != 1 {
		t.Fatalf("after the first call: %+v", s.Rec)
	}
	s.count(&ref, 3600, recT+70, 1)
	if s.Rec.Samples != 1 || s.Rec.MeanInterval != 60 || s.Rec.Count != 2 {
		t.Fatalf("after the second call: %+v", s.Rec)
	}
}

// A quiet cell's record of its count loses to any later copy of the cell's
// state in the same window, even one made by a mover whose clock is behind
// (a hot export's Last is its mover's now): a record a stopped quiet move
// left never wins over the cell's next move into cold. It is of the window
// States read, with the count read.
func TestQuietRecords_ACountLosesToAnyLaterCopyOfItsWindow(t *testing.T) {
	t.Parallel()
	c := newConfCell(10, time.Hour)
	ref := c.ref()
	idx := confT0.UnixMilli() / time.Hour.Milliseconds()
	m := &HotMover{Now: func() time.Time { return confT0.Add(40 * time.Minute) }}
	recs, err := m.QuietRecords([]Ref{ref}, []HotState{{Counting: true, Count: "7", Window: idx}})
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
