package userdays

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/quota-platform/quota/analytics/usage"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// At maxChunkLevel batches merge into one of the same level: not at
// mergeFanIn−1 of them, at mergeFanIn, with every user's entries summed
// (the merge deletes the old batches before it writes the new one of the
// same level), and a second Rollup leaves the one batch alone. A day of
// flushes does not get there in a test's time, so the batches are
// written as merges would have left them.
func TestChunkMerge_TopLevelMergesIntoItself(t *testing.T) {
	t.Parallel()
	db := testenv.MySQLShards(t, 1)[0]
	u := newTestStore()
	ctx := context.Background()
	today := t0Day
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const users = 600 // more than partCap: each batch has 4 parts
	plant := func(batches int) {
		t.Helper()
		for range batches {
			var rows []Row
			for i := range users {
				id := usage.RowID(usage.AppendRowID(nil, "app", "if", fmt.Sprintf("u%d", i)))
				rows = append(rows, NewRow(Key{ID: id, Day: today}, usage.Counts{Calls: 1, Allowed: 1}))
			}
			chunks := appendAppChunks(nil, SortRows(rows), chunkMaxRaw, &chunkBuffers{})
			for i := range chunks {
				chunks[i].level = maxChunkLevel
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var id [16]byte
			_, _ = rand.Read(id[:])
			if err := u.insertChunks(ctx, tx, nil, todayChunks, id, chunks); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	state := func() (batches, entries int64) {
		t.Helper()
		err := db.QueryRow("SELECT COUNT(DISTINCT batch_id), COALESCE(SUM(entries), 0) FROM usage_user_chunks WHERE level = ?",
			maxChunkLevel).Scan(&batches, &entries)
		if err != nil {
			t.Fatal(err)
		}
		return batches, entries
	}
	steps := []struct {
		plant, wantMerges        int
		wantBatches, wantEntries int64
		wantCalls                int64 // of each user
	}{
		{mergeFanIn - 1, 0, mergeFanIn - 1, (mergeFanIn - 1) * users, mergeFanIn - 1},
		{1, 1, 1, users, mergeFanIn},
		{0, 0, 1, users, mergeFanIn}, // nothing new
	}
	for i, st := range steps {
		plant(st.plant)
		merges, err := u.Merge(ctx, conn, today) // the Rollup's merges
		if err != nil {
			t.Fatal(err)
		}
		batches, entries := state()
		if merges != st.wantMerges || batches != st.wantBatches || entries != st.wantEntries {
			t.Fatalf("step %d: %d merges, %d batches of level %d holding %d entries; want %d, %d, %d",
				i, merges, batches, maxChunkLevel, entries, st.wantMerges, st.wantBatches, st.wantEntries)
		}
		for _, user := range []string{"u0", "u123", "u599"} {
			got := userDay(t, u, db, "app", user, today)
			if got.Calls != st.wantCalls || got.Allowed != st.wantCalls {
				t.Fatalf("step %d: %s has %+v, want %d calls, all allowed", i, user, got, st.wantCalls)
			}
		}
	}
}
