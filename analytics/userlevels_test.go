package analytics_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/quota-platform/quota/analytics"
	"github.com/quota-platform/quota/analytics/usage"
)

// The compaction of today's chunks (analytics/userdays/fold.go), as the tests see it:
// Rollup merges an app's level-0 batches once there are 32, and its
// batches of a level L >= 1 into one of L+1 once there are 16, up to level
// 3. Written out here rather than taken from the package, so that the
// tests say what the figures are.
const (
	minFlushBatches = 32
	fanIn           = 16
	topLevel        = 3
	// maxQueryBatches is the most batches a query for one user may read
	// right after a Rollup: 31 of level 0 and 15 of each level above.
	maxQueryBatches = minFlushBatches - 1 + topLevel*(fanIn-1)
)

// levels is the number of distinct batches of each chunk level of app's
// chunks on d (over the shards).
func (e *env) levels(t *testing.T, app string, d analytics.Day) map[int]int64 {
	t.Helper()
	out := map[int]int64{}
	for _, db := range e.DBs {
		rows, err := db.Query("SELECT level, COUNT(DISTINCT batch_id) FROM usage_user_chunks WHERE day = ? AND app_id = ? GROUP BY level", d.String(), app)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var l int
			var n int64
			if err := rows.Scan(&l, &n); err != nil {
				t.Fatal(err)
			}
			out[l] += n
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	return out
}

// tables is every row of usage_user_chunks, usage_user_sealed and
// usage_user_daily (bodies as their MD5), in primary-key order, shard by
// shard.
func (e *env) tables(t *testing.T) []string {
	t.Helper()
	var out []string
	for i, db := range e.DBs {
		for _, q := range []string{
			"SELECT CONCAT_WS('|', day, HEX(app_id), part, HEX(batch_id), seq, level, entries, MD5(body)) FROM usage_user_chunks ORDER BY day, app_id, part, batch_id, seq",
			"SELECT CONCAT_WS('|', 'sealed', day, HEX(app_id), part, seq, entries, MD5(body)) FROM usage_user_sealed ORDER BY day, app_id, part, seq",
			"SELECT CONCAT_WS('|', day, HEX(app_id), HEX(user_id), HEX(interface_id), calls, allowed, denied) FROM usage_user_daily ORDER BY day, app_id, user_id, interface_id",
		} {
			rows, err := db.Query(q)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var s string
				if err := rows.Scan(&s); err != nil {
					t.Fatal(err)
				}
				out = append(out, fmt.Sprintf("shard %d: %s", i, s))
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			rows.Close()
		}
	}
	return out
}

// rollup runs Rollup, then a second time, which must change nothing.
func (e *env) rollup(t *testing.T, when string) analytics.RollupResult {
	t.Helper()
	ctx := context.Background()
	res, err := e.Rec.Rollup.Run(ctx)
	if err != nil {
		t.Fatalf("%s: rollup: %v", when, err)
	}
	before := e.tables(t)
	again, err := e.Rec.Rollup.Run(ctx)
	if err != nil {
		t.Fatalf("%s: second rollup: %v", when, err)
	}
	if again.UserMerges != 0 || again.SealedDays != 0 {
		t.Fatalf("%s: second rollup merged %d times and sealed %d (day, app), want none", when, again.UserMerges, again.SealedDays)
	}
	if after := e.tables(t); !slices.Equal(before, after) {
		t.Fatalf("%s: a second rollup changed the user tables from %d rows to %d", when, len(before), len(after))
	}
	return res
}

// checkSample compares the UserDay of every stride-th user (by hash) with
// the truth.
func (u userTruth) checkSample(t *testing.T, e *env, when string, stride uint64) {
	t.Helper()
	sample := userTruth{}
	for d, apps := range u {
		for app, users := range apps {
			for user, ifaces := range users {
				if usage.FNV1a64(user)%stride != 0 {
					continue
				}
				if sample[d] == nil {
					sample[d] = map[string]map[string]map[string]analytics.Counts{}
				}
				if sample[d][app] == nil {
					sample[d][app] = map[string]map[string]analytics.Counts{}
				}
				sample[d][app][user] = ifaces
			}
		}
	}
	sample.check(t, e, when)
}

// checkSealed compares the sealed chunks of d with the truth: each (user,
// interface) in one entry, with its day's counts.
func (u userTruth) checkSealed(t *testing.T, e *env, d analytics.Day) {
	t.Helper()
	got := map[string]map[string]map[string]analytics.Counts{}
	for _, db := range e.DBs {
		rows, err := db.Query("SELECT app_id, body FROM usage_user_sealed WHERE day = ?", d.String())
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var app string
			var body []byte
			if err := rows.Scan(&app, &body); err != nil {
				t.Fatal(err)
			}
			if got[app] == nil {
				got[app] = map[string]map[string]analytics.Counts{}
			}
			err := analytics.EachUserEntry(body, func(user, iface string, c analytics.Counts) {
				if got[app][user] == nil {
					got[app][user] = map[string]analytics.Counts{}
				}
				if _, dup := got[app][user][iface]; dup {
					t.Errorf("sealed chunks of %s on %s hold %s/%s twice", app, d, user, iface)
				}
				got[app][user][iface] = c
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	for _, app := range slices.Sorted(maps.Keys(u[d])) {
		if g, w := fmt.Sprint(got[app]), fmt.Sprint(u[d][app]); g != w {
			t.Errorf("sealed chunks of %s on %s differ from what was recorded (%d users, want %d)", app, d, len(got[app]), len(u[d][app]))
		}
	}
	if len(got) != len(u[d]) {
		t.Errorf("usage_user_sealed holds %d apps on %s, want %d", len(got), d, len(u[d]))
	}
}

// Through a day of flushes and Rollups, today's chunks are merged level by
// level, so the batches a query for one user reads stay under
// maxQueryBatches (plus the flushes since the last Rollup) however many
// flushes the day has had, for a quiet app (one chunk per flush) and a busy
// one (four parts per flush) alike; every user's figures stay exact, and
// once the day is over the seal holds exactly what was recorded.
func TestUserChunks_BatchesAQueryReadsStayBoundedAllDay(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name         string
		flushes      int
		rollupEvery  int // flushes
		wantTopLevel int // the highest level the day reaches
	}{
		// Rollups more often than the 32-flush threshold: level 0 waits.
		{"rollup every 4 flushes", 520, 4, 2},
		// The 10-minute schedule: each Rollup merges level 0.
		{"rollup every 40 flushes", 640, 40, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 1, nil)
			truth := userTruth{}
			today := day(e.Clk.Now())
			sinceRollup := 0
			for f := range tc.flushes {
				for i := range 3 {
					truth.record(e, "quiet", fmt.Sprintf("if%d", i%2), fmt.Sprintf("q%d", (f+i)%20), (f+i)%3 != 0)
				}
				// 600 distinct users of a pool of 1,500 per flush: more
				// than 512, so each flush writes 4 parts.
				for i := range 600 {
					truth.record(e, "busy", "if", fmt.Sprintf("b%d", (f*600+i)%1500), i%5 != 0)
				}
				e.flush()
				e.Clk.Advance(15 * time.Second)
				sinceRollup++
				for _, app := range []string{"quiet", "busy"} {
					checkQueryBatches(t, e, app, today, sinceRollup, fmt.Sprintf("flush %d", f+1))
				}
				if (f+1)%tc.rollupEvery != 0 {
					continue
				}
				when := fmt.Sprintf("rollup after flush %d", f+1)
				e.rollup(t, when)
				sinceRollup = 0
				for _, app := range []string{"quiet", "busy"} {
					checkLevelBounds(t, e.levels(t, app, today), app, when)
				}
				if (f+1)%(4*tc.rollupEvery) == 0 {
					truth.checkSample(t, e, when, 50)
				}
			}
			for _, app := range []string{"quiet", "busy"} {
				if l := e.levels(t, app, today); l[tc.wantTopLevel] == 0 {
					t.Errorf("%s: batches per level %v at the end of the day: level %d never reached", app, l, tc.wantTopLevel)
				}
			}
			truth.check(t, e, "end of the day")
			e.Clk.Advance(24 * time.Hour)
			if _, err := e.Rec.Rollup.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := e.count(t, "SELECT COUNT(*) FROM usage_user_chunks"); n != 0 {
				t.Fatalf("%d chunks left after the day was sealed", n)
			}
			truth.checkSealed(t, e, today)
			truth.checkSample(t, e, "after the seal", 10)
		})
	}
}

// checkQueryBatches fails the test if app's batches on d (those a query for
// one of its users may read) exceed maxQueryBatches plus the flushes since
// the last Rollup.
func checkQueryBatches(t *testing.T, e *env, app string, d analytics.Day, sinceRollup int, when string) {
	t.Helper()
	total := int64(0)
	l := e.levels(t, app, d)
	for _, n := range l {
		total += n
	}
	if total > int64(maxQueryBatches+sinceRollup) {
		t.Fatalf("%s: %s has %d batches (per level %v), over %d + %d flushes since the last rollup",
			when, app, total, l, maxQueryBatches, sinceRollup)
	}
}

// checkLevelBounds fails the test unless, right after a Rollup, every level
// is below its merge threshold and none is above topLevel.
func checkLevelBounds(t *testing.T, l map[int]int64, app, when string) {
	t.Helper()
	for level, n := range l {
		limit := int64(fanIn)
		if level == 0 {
			limit = minFlushBatches
		}
		if n >= limit || level > topLevel {
			t.Fatalf("%s: %s has %d batches of level %d (per level %v), want fewer than %d and levels up to %d",
				when, app, n, level, l, limit, topLevel)
		}
	}
}

// A quiet app's chunks climb the levels exactly at the thresholds: its
// 31st flush batch is not merged, its 32nd is; fifteen level-1 batches
// stay, the sixteenth merge makes one of level 2. After each Rollup a
// second one finds nothing to merge and leaves both tables as they were
// (rollup), and every user's figures stay exact.
func TestUserChunks_MergedLevelByLevelAtTheThresholds(t *testing.T) {
	t.Parallel()
	type step struct {
		flushes    int
		wantMerges int
		want       map[int]int64 // level → batches
	}
	steps := []step{{31, 0, map[int]int64{0: 31}}, {1, 1, map[int]int64{1: 1}}}
	for n := int64(2); n <= 6; n++ {
		steps = append(steps, step{32, 1, map[int]int64{1: n}})
	}
	steps = append(steps, step{31, 0, map[int]int64{0: 31, 1: 6}}, step{1, 1, map[int]int64{1: 7}})
	for n := int64(8); n <= 15; n++ {
		steps = append(steps, step{32, 1, map[int]int64{1: n}})
	}
	steps = append(steps,
		// The sixteenth level-1 batch, merged into level 2 in the same Rollup.
		step{32, 2, map[int]int64{2: 1}},
		step{40, 1, map[int]int64{1: 1, 2: 1}},
	)
	e := newEnv(t, 1, nil)
	truth := userTruth{}
	today := day(e.Clk.Now())
	flushes := 0
	for _, st := range steps {
		for range st.flushes {
			user := fmt.Sprintf("u%d", flushes%5)
			e.Rec.Recorder.Record("tiny", "if", user, flushes%4 != 0)
			truth.add(today, "tiny", user, "if", flushes%4 != 0)
			e.flush()
			e.Clk.Advance(15 * time.Second)
			flushes++
		}
		when := fmt.Sprintf("after %d flushes", flushes)
		res := e.rollup(t, when)
		if got := e.levels(t, "tiny", today); res.UserMerges != st.wantMerges || !maps.Equal(got, st.want) {
			t.Fatalf("%s: %d merges, batches per level %v; want %d, %v", when, res.UserMerges, got, st.wantMerges, st.want)
		}
		truth.check(t, e, when)
	}
}

// The level-0 trigger counts flush batches, not chunk rows: an app whose
// every flush writes 4 or 16 part rows is merged at its 32nd flush, like
// one writing a single row, and not before.
func TestUserChunks_MergeTriggerCountsBatchesNotRows(t *testing.T) {
	t.Parallel()
	apps := []struct {
		name  string
		users int // per flush, all distinct
		parts int64
	}{
		{"one-part", 5, 1},
		{"four-parts", 600, 4},      // > 512 entries
		{"sixteen-parts", 2100, 16}, // > 2,048 entries
	}
	e := newEnv(t, 1, nil)
	truth := userTruth{}
	today := day(e.Clk.Now())
	flush := func(f int) {
		for _, a := range apps {
			for i := range a.users {
				user := fmt.Sprintf("%s-%d", a.name, (f*a.users+i)%(3*a.users))
				e.Rec.Recorder.Record(a.name, "if", user, i%3 != 0)
				truth.add(today, a.name, user, "if", i%3 != 0)
			}
		}
		e.flush()
		e.Clk.Advance(15 * time.Second)
	}
	for f := range minFlushBatches - 1 {
		flush(f)
	}
	res := e.rollup(t, "after 31 flushes")
	for _, a := range apps {
		if l := e.levels(t, a.name, today); !maps.Equal(l, map[int]int64{0: minFlushBatches - 1}) {
			t.Errorf("%s (%d rows per flush): batches per level %v after 31 flushes, want 31 of level 0, unmerged", a.name, a.parts, l)
			continue
		}
		rows := e.count(t, "SELECT COUNT(*) FROM usage_user_chunks WHERE app_id = ? AND level = 0", a.name)
		if rows != (minFlushBatches-1)*a.parts {
			t.Errorf("%s: %d level-0 chunk rows after 31 flushes, want %d (%d parts per flush)", a.name, rows, (minFlushBatches-1)*a.parts, a.parts)
		}
	}
	if res.UserMerges != 0 {
		t.Errorf("31 flushes: %d merges, want 0", res.UserMerges)
	}
	truth.checkSample(t, e, "after 31 flushes", 20)
	flush(minFlushBatches - 1)
	res = e.rollup(t, "after 32 flushes")
	for _, a := range apps {
		if l := e.levels(t, a.name, today); !maps.Equal(l, map[int]int64{1: 1}) {
			t.Errorf("%s: batches per level %v after 32 flushes, want one of level 1", a.name, l)
		}
	}
	if res.UserMerges != len(apps) {
		t.Errorf("32 flushes: %d merges, want %d", res.UserMerges, len(apps))
	}
	truth.checkSample(t, e, "after 32 flushes", 20)
}
