package cold

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/internal/testsupport/tierstest"
	"github.com/quota-platform/quota/tiers"
)

func TestColdCheck_SendsEachShardsTransactionInTwoRoundTrips(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		shards []int // the shard of each cell of the op
		cost   int64
		mode   tiers.Mode
		want   int64 // round trips
		count  int64 // the first cell's count after (1 before)
	}{
		{"counted, one shard", []int{0, 0}, 1, tiers.Enforce, 2, 2},
		{"counted, two shards", []int{0, 1}, 1, tiers.Enforce, 4, 2},
		{"denied, one shard", []int{0}, 100, tiers.Enforce, 2, 1},
		{"refund, one shard", []int{1}, 1, tiers.Refund, 2, 0},
		{"dry run, two shards: reads only", []int{0, 1}, 1, tiers.DryRun, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dbs, trips := testenv.CountedShards(t, 2)
			s := NewStore(dbs, Options{})
			var cells []confCell
			for _, sh := range tc.shards {
				cells = append(cells, tierstest.CellOnShard(t, s, sh, 10))
			}
			ctx := context.Background()
			// Rows exist (a first call reserves them first).
			if err := s.Check(ctx, confT0, []*tiers.Op{confOp(confT0, 1, tiers.Enforce, cells...)}); err != nil {
				t.Fatal(err)
			}
			trips.Store(0)
			op := confOp(confT0, tc.cost, tc.mode, cells...)
			if err := s.Check(ctx, confT0, []*tiers.Op{op}); err != nil {
				t.Fatal(err)
			}
			if n := trips.Load(); n != tc.want {
				t.Fatalf("%d round trips, want %d", n, tc.want)
			}
			e := &confEnv{Name: "cold", Store: s, Mover: s}
			if n := e.Count(t, confT0, cells[0]); n != tc.count {
				t.Fatalf("count %d, want %d", n, tc.count)
			}
		})
	}
}

// inTransaction reports whether the one connection of db has a
// transaction open.
func inTransaction(t *testing.T, db *sql.DB) bool {
	t.Helper()
	var open int
	if err := db.QueryRow("SELECT @@in_transaction").Scan(&open); err != nil {
		t.Fatal(err)
	}
	return open != 0
}

func TestColdCheck_FailedCommitHandsBackNoOpenTransaction(t *testing.T) {
	t.Parallel()
	dbs, faults := testenv.FaultyShards(t, 1)
	dbs[0].SetMaxOpenConns(1) // the check's connection is the one looked at after
	s := NewStore(dbs, Options{})
	ctx := context.Background()
	c := newConfCell(10, time.Hour)
	if err := s.Check(ctx, confT0, []*tiers.Op{confOp(confT0, 1, tiers.Enforce, c)}); err != nil {
		t.Fatal(err)
	}
	faults.Set(func(int) error { return errors.New("injected: commit fails") })
	if err := s.Check(ctx, confT0, []*tiers.Op{confOp(confT0, 1, tiers.Enforce, c)}); !errors.Is(err, tiers.ErrUnavailable) {
		t.Fatalf("err %v, want ErrUnavailable", err)
	}
	if inTransaction(t, dbs[0]) {
		t.Fatal("the pooled connection still has the failed check's transaction open")
	}
	faults.Set(nil)
	e := &confEnv{Name: "cold", Store: s, Mover: s}
	if n := e.Count(t, confT0, c); n != 1 {
		t.Fatalf("count %d, want 1", n)
	}
}

func TestColdCheck_ConnectionKilledBeforeCommitCountsNothingAndTheNextCheckWorks(t *testing.T) {
	t.Parallel()
	dbs, faults := testenv.FaultyShards(t, 1)
	var name string
	if err := dbs[0].QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("mysql", testenv.MySQLConfig(t, "").FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	s := NewStore(dbs, Options{})
	ctx := context.Background()
	c := newConfCell(10, time.Hour)
	if err := s.Check(ctx, confT0, []*tiers.Op{confOp(confT0, 1, tiers.Enforce, c)}); err != nil {
		t.Fatal(err)
	}
	killed := 0
	faults.Set(func(int) error {
		// The check holds its row lock on one of the shard's connections.
		rows, err := admin.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ?", name)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return err
			}
			if _, err := admin.Exec("KILL CONNECTION ?", id); err == nil {
				killed++
			}
		}
		return rows.Err()
	})
	if err := s.Check(ctx, confT0, []*tiers.Op{confOp(confT0, 1, tiers.Enforce, c)}); !errors.Is(err, tiers.ErrUnavailable) {
		t.Fatalf("err %v, want ErrUnavailable", err)
	}
	faults.Set(nil)
	if killed == 0 {
		t.Fatal("no connection killed: the test did not test anything")
	}
	op := confOp(confT0, 1, tiers.Enforce, c)
	if err := s.Check(ctx, confT0, []*tiers.Op{op}); err != nil || !op.Committed || op.Out[0].Remaining != 8 {
		t.Fatalf("next check: err %v committed %v outcomes %+v, want counted with 8 left", err, op.Committed, op.Out)
	}
}

// Import keeps the newer of the record it is given and the row it finds,
// cell by cell, whether the chunk's rows are all new (one INSERT IGNORE is
// the whole import), all present, or some of each.
func TestColdStore_ImportKeepsTheNewerRecordPerCell(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	at := func(c confCell, last int64, count int64) tiers.Record {
		return tiers.Record{Ref: c.Ref(), Count: count, First: last, Last: last}
	}
	t0 := confT0.Unix()
	tests := []struct {
		name  string
		held  []int64 // per cell, the Last of the row held before (0: no row)
		given []int64 // per cell, the Last of the imported record
		want  []int64 // per cell, the Last held after
	}{
		{"all new", []int64{0, 0, 0}, []int64{t0, t0, t0}, []int64{t0, t0, t0}},
		{"all held, older", []int64{t0, t0}, []int64{t0 + 60, t0 + 120}, []int64{t0 + 60, t0 + 120}},
		{"all held, newer", []int64{t0 + 60, t0 + 60}, []int64{t0, t0}, []int64{t0 + 60, t0 + 60}},
		{"some of each", []int64{0, t0 + 60, t0, 0}, []int64{t0, t0, t0 + 60, t0 + 30}, []int64{t0, t0 + 60, t0 + 60, t0 + 30}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := NewStore(testenv.MySQLShards(t, 2), Options{})
			cells := make([]confCell, len(tc.held))
			var held, given []tiers.Record
			for i := range cells {
				cells[i] = newConfCell(10, time.Hour)
				if tc.held[i] != 0 {
					held = append(held, at(cells[i], tc.held[i], 1))
				}
				given = append(given, at(cells[i], tc.given[i], 2))
			}
			if err := s.Import(ctx, held); err != nil {
				t.Fatal(err)
			}
			if err := s.Import(ctx, given); err != nil {
				t.Fatal(err)
			}
			for i, c := range cells {
				got, err := s.Export(ctx, []tiers.Ref{c.Ref()})
				if err != nil || len(got) != 1 {
					t.Fatalf("cell %d: %v %v", i, got, err)
				}
				if got[0].Last != tc.want[i] {
					t.Errorf("cell %d: held %d, given %d: holds %d, want %d", i, tc.held[i], tc.given[i], got[0].Last, tc.want[i])
				}
			}
		})
	}
}
