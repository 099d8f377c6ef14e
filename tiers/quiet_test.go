package tiers

import (
	"context"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testenv"
)

// InsertNew writes a record only where its cell has no row; DeleteUnchanged
// deletes a row only while it holds exactly the record given: a row a
// check has counted in since, or one InsertNew left alone, is kept.
func TestColdStore_InsertNewAndDeleteUnchangedKeepCountedRows(t *testing.T) {
	t.Parallel()
	s := NewColdStore(testenv.MySQLShards(t, 2), ColdOptions{})
	ctx := context.Background()
	counted, held, untouched := newConfCell(10, time.Hour), newConfCell(10, time.Hour), newConfCell(10, time.Hour)
	if err := s.Check(ctx, confT0, []*Op{confOp(confT0, 4, Enforce, held)}); err != nil {
		t.Fatal(err)
	}
	m := &HotMover{Now: func() time.Time { return confT0 }}
	refs := []Ref{counted.ref(), held.ref(), untouched.ref()}
	recs, err := m.QuietRecords(refs, make([]HotState, len(refs)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.InsertNew(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx, confT0, []*Op{confOp(confT0, 2, Enforce, counted)}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteUnchanged(ctx, recs); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Exists(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	if !rows[0] || !rows[1] || rows[2] {
		t.Fatalf("rows after the delete: %v, want counted and held kept, untouched gone", rows)
	}
	got, err := s.Export(ctx, refs[:2])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Count != 2 || got[1].Count != 4 {
		t.Fatalf("records %+v, want counts 2 and 4", got)
	}
}

// An idle cell's record counts 0 in the current window and loses to any
// record of it, so an import of a count over it keeps the count.
func TestQuietRecords_AnIdleCellsRecordLosesToACountOfTheWindow(t *testing.T) {
	t.Parallel()
	s := NewColdStore(testenv.MySQLShards(t, 1), ColdOptions{})
	ctx := context.Background()
	c := newConfCell(10, time.Hour)
	m := &HotMover{Now: func() time.Time { return confT0 }}
	idle, err := m.QuietRecords([]Ref{c.ref()}, make([]HotState, 1))
	if err != nil {
		t.Fatal(err)
	}
	st := recState{rec: idle[0], present: true}
	if u := st.used(3600, confT0.Unix()); u != 0 {
		t.Fatalf("idle record uses %d of the window", u)
	}
	if err := s.InsertNew(ctx, idle); err != nil {
		t.Fatal(err)
	}
	// What a move of the cell counting since (hot, 3 calls) imports.
	nowS := confT0.Unix()
	if err := s.Import(ctx, []Record{{Ref: c.ref(), Count: 3, Last: nowS, First: nowS}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Export(ctx, []Ref{c.ref()})
	if err != nil || len(got) != 1 || got[0].Count != 3 {
		t.Fatalf("after the import: %+v %v, want count 3", got, err)
	}
}

// A record that has seen no call (a move's empty copy) observes no
// interval at its first call: the time since it was made is not one.
func TestRecord_AnEmptyCopyObservesNoIntervalAtItsFirstCall(t *testing.T) {
	t.Parallel()
	ref := Ref{Window: time.Hour}
	s := &recState{rec: Record{Ref: ref, Last: recT - 3*3600, First: recT - 3*3600}, present: true}
	s.count(&ref, 3600, recT+10, 1)
	if s.rec.Samples != 0 || s.rec.MeanInterval != 0 || s.rec.Count != 1 {
		t.Fatalf("after the first call: %+v", s.rec)
	}
	s.count(&ref, 3600, recT+70, 1)
	if s.rec.Samples != 1 || s.rec.MeanInterval != 60 || s.rec.Count != 2 {
		t.Fatalf("after the second call: %+v", s.rec)
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
