package analytics

import (
	"context"
	"testing"

	"github.com/quota-platform/quota/analytics/usage"
	"github.com/quota-platform/quota/analytics/userdays"
)

// A flush whose COMMIT answer was lost is resolved by its batch id: a batch
// that did commit is dropped, one that did not is written again, so nothing
// counts twice or goes missing.
func TestUncertainCommitResolvedByBatchID(t *testing.T) {
	t.Parallel()
	r, db, clk := newShardRecorder(t)
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		r.Recorder.Record("app", "if", "u", true)
	}
	if err := r.Flusher.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Pretend the COMMIT of a batch of 10 more calls answered an error but
	// did happen (its id is in analytics_batches), and of another batch of 3
	// calls that did not happen.
	day := DayOf(clk.Now())
	mk := func(n int64) *rowset {
		rs := newRowset()
		c := Counts{Calls: n, Allowed: n}
		rs.addCalls("app", "if", clk.Now().Unix(), c)
		rs.addUser(rs.group(userdays.AppDay{App: "app", Day: day}), userdays.NewRow(userdays.Key{ID: makeRowID("app", "if", "u"), Day: day}, c))
		return rs
	}
	committed := &batch{id: [16]byte{1, 2, 3}, rows: mk(10)}
	lost := &batch{id: [16]byte{4, 5, 6}, rows: mk(3)}
	// The committed one's rows are in MySQL already.
	tx, _ := db.Begin()
	if _, err := r.Flusher.writeRows(ctx, tx, committed.rows, committed.id, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO analytics_batches (batch_id) VALUES (?)", committed.id[:]); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r.Flusher.mu.Lock()
	r.Flusher.shards[0].uncertain = []*batch{committed, lost}
	r.Flusher.mu.Unlock()
	if err := r.Flusher.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := r.Stats.AppDay(ctx, "app", day)
	if err != nil {
		t.Fatal(err)
	}
	if st.Calls != 23 || len(r.Flusher.shards[0].uncertain) != 0 || r.Flusher.shards[0].pending.len() != 0 {
		t.Fatalf("calls %d (want 10 + 10 committed + 3 rewritten = 23), uncertain %d", st.Calls, len(r.Flusher.shards[0].uncertain))
	}
	u, err := r.Stats.UserDay(ctx, "app", "u", day)
	if err != nil || u.Calls != 23 {
		t.Fatalf("user calls %d %v, want 23", u.Calls, err)
	}
}

// addCalls adds c to the rows of (app, iface) at minute t (the flush
// adds a fold's rows with ifaceDay and add).
func (r *rowset) addCalls(app, iface string, t int64, c Counts) {
	k := dailyKey{app: app, iface: iface, day: Day(usage.FloorDiv(t, 86400))}
	r.add(r.ifaceDay(k, r.daily[k]), t, c)
}
