package analytics

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/quota-platform/quota/analytics/usage"
)

// At maxChunkLevel batches merge into one of the same level: not at
// mergeFanIn−1 of them, at mergeFanIn, with every user's entries summed
// (the merge deletes the old batches before it writes the new one of the
// same level), and a second Rollup leaves the one batch alone. A day of
// flushes does not get there in a test's time, so the batches are
// written as merges would have left them.
func TestChunkMerge_TopLevelMergesIntoItself(t *testing.T) {
	t.Parallel()
	r, db, clk := newShardRecorder(t)
	ctx := context.Background()
	today := DayOf(clk.Now())
	const users = 600 // more than partCap: each batch has 4 parts
	plant := func(batches int) {
		t.Helper()
		for range batches {
			var rows []userRow
			for i := range users {
				id := usage.RowID(usage.AppendRowID(nil, "app", "if", fmt.Sprintf("u%d", i)))
				rows = append(rows, newUserRow(userKey{id: id, day: today}, Counts{Calls: 1, Allowed: 1}))
			}
			chunks := appendAppChunks(nil, sortUserRows(rows), chunkMaxRaw, &chunkBuffers{})
			for i := range chunks {
				chunks[i].level = maxChunkLevel
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var id [16]byte
			_, _ = rand.Read(id[:])
			if err := r.Flusher.users.insertChunks(ctx, tx, nil, todayChunks, id, chunks); err != nil {
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
		res, err := r.Rollup.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		batches, entries := state()
		if res.UserMerges != st.wantMerges || batches != st.wantBatches || entries != st.wantEntries {
			t.Fatalf("step %d: %d merges, %d batches of level %d holding %d entries; want %d, %d, %d",
				i, res.UserMerges, batches, maxChunkLevel, entries, st.wantMerges, st.wantBatches, st.wantEntries)
		}
		for _, u := range []string{"u0", "u123", "u599"} {
			got, err := r.Stats.UserDay(ctx, "app", u, today)
			if err != nil {
				t.Fatal(err)
			}
			if got.Calls != st.wantCalls || got.Allowed != st.wantCalls {
				t.Fatalf("step %d: %s has %+v, want %d calls, all allowed", i, u, got.Counts, st.wantCalls)
			}
		}
	}
}
