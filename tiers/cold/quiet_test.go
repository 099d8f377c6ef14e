package cold

import (
	"context"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/hot"
)

// InsertNew writes a record only where its cell has no row; DeleteUnchanged
// deletes a row only while it holds exactly the record given: a row a
// check has counted in since, or one InsertNew left alone, is kept.
func TestColdStore_InsertNewAndDeleteUnchangedKeepCountedRows(t *testing.T) {
	t.Parallel()
	s := NewStore(testenv.MySQLShards(t, 2), Options{})
	ctx := context.Background()
	counted, held, untouched := newConfCell(10, time.Hour), newConfCell(10, time.Hour), newConfCell(10, time.Hour)
	if err := s.Check(ctx, confT0, []*tiers.Op{confOp(confT0, 4, tiers.Enforce, held)}); err != nil {
		t.Fatal(err)
	}
	m := &hot.Mover{Now: func() time.Time { return confT0 }}
	refs := []tiers.Ref{counted.Ref(), held.Ref(), untouched.Ref()}
	recs, err := m.QuietRecords(refs, make([]hot.State, len(refs)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.InsertNew(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx, confT0, []*tiers.Op{confOp(confT0, 2, tiers.Enforce, counted)}); err != nil {
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
	s := NewStore(testenv.MySQLShards(t, 1), Options{})
	ctx := context.Background()
	c := newConfCell(10, time.Hour)
	m := &hot.Mover{Now: func() time.Time { return confT0 }}
	idle, err := m.QuietRecords([]tiers.Ref{c.Ref()}, make([]hot.State, 1))
	if err != nil {
		t.Fatal(err)
	}
	st := tiers.RecState{Rec: idle[0], Present: true}
	if u := st.Used(3600, confT0.Unix()); u != 0 {
		t.Fatalf("idle record uses %d of the window", u)
	}
	if err := s.InsertNew(ctx, idle); err != nil {
		t.Fatal(err)
	}
	// What a move of the cell counting since (hot, 3 calls) imports.
	nowS := confT0.Unix()
	if err := s.Import(ctx, []tiers.Record{{Ref: c.Ref(), Count: 3, Last: nowS, First: nowS}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Export(ctx, []tiers.Ref{c.Ref()})
	if err != nil || len(got) != 1 || got[0].Count != 3 {
		t.Fatalf("after the import: %+v %v, want count 3", got, err)
	}
}
