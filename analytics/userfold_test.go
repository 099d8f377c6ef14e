package analytics_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quota-platform/quota/analytics"
)

// userTruth is what each user's stats must say: day → app → user →
// interface → counts.
type userTruth map[analytics.Day]map[string]map[string]map[string]analytics.Counts

func (u userTruth) add(d analytics.Day, app, user, iface string, allowed bool) {
	if u[d] == nil {
		u[d] = map[string]map[string]map[string]analytics.Counts{}
	}
	if u[d][app] == nil {
		u[d][app] = map[string]map[string]analytics.Counts{}
	}
	if u[d][app][user] == nil {
		u[d][app][user] = map[string]analytics.Counts{}
	}
	c := u[d][app][user][iface]
	c.Calls++
	if allowed {
		c.Allowed++
	} else {
		c.Denied++
	}
	u[d][app][user][iface] = c
}

// record records one call with e's Recorder, on the day of e's clock, and
// adds it to the truth.
func (u userTruth) record(e *env, app, iface, user string, allowed bool) {
	e.Rec.Recorder.Record(app, iface, user, allowed)
	u.add(day(e.Clk.Now()), app, user, iface, allowed)
}

// check compares every user's UserDay with the truth.
func (u userTruth) check(t *testing.T, e *env, when string) {
	t.Helper()
	for d, apps := range u {
		for app, users := range apps {
			for user, want := range users {
				got, err := e.Rec.Stats.UserDay(context.Background(), app, user, d)
				if err != nil {
					t.Fatalf("%s: UserDay(%s, %s, %s): %v", when, app, user, d, err)
				}
				gotIf := map[string]analytics.Counts{}
				for _, ic := range got.Interfaces {
					gotIf[ic.InterfaceID] = ic.Counts
				}
				if fmt.Sprint(gotIf) != fmt.Sprint(want) {
					t.Fatalf("%s: %s/%s on %s = %v, want %v", when, app, user, d, gotIf, want)
				}
			}
		}
	}
}

// count sums a COUNT(*)-like query over the shards.
func (e *env) count(t *testing.T, q string, args ...any) int64 {
	t.Helper()
	var total int64
	for _, db := range e.DBs {
		var n int64
		if err := db.QueryRow(q, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		total += n
	}
	return total
}

// A flush writes per-user figures as chunks; once their day is over,
// Rollup seals each app's chunks of that day into one batch of
// usage_user_sealed, one entry per (user, interface) for the day, and
// deletes them. Every user's stats are the same before and after, today's
// chunks stay, a second Rollup changes nothing, rows that an earlier
// version folded into usage_user_daily still count, and a late flush of a
// sealed day is sealed into it by the next Rollup.
func TestUserFigures_SealedOnceTheDayIsOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, nil)
	ctx := context.Background()
	truth := userTruth{}
	// Day 1, two flushes: "busy" sees 3,000 users in the first (its chunks
	// split into parts), and half of them again in the second, so their
	// figures sit in two chunks; "quiet" a few users on two interfaces.
	for i := range 3000 {
		truth.record(e, "busy", "a", fmt.Sprintf("user-%d", i), true)
	}
	for i := range 10 {
		truth.record(e, "quiet", "a", fmt.Sprintf("u%d", i), true)
		truth.record(e, "quiet", "b", fmt.Sprintf("u%d", i), i%2 == 0)
	}
	e.flush()
	e.Clk.Advance(time.Minute)
	for i := range 1500 {
		truth.record(e, "busy", "a", fmt.Sprintf("user-%d", i), i%3 != 0)
		truth.record(e, "busy", "b", fmt.Sprintf("user-%d", i*2), true)
	}
	e.flush()
	// A row of usage_user_daily, as versions before the seal left them.
	d1 := day(t0)
	legacy := e.DBs[analytics.ShardIndex("quiet", len(e.DBs))]
	if _, err := legacy.Exec("INSERT INTO usage_user_daily (app_id, user_id, day, interface_id, calls, allowed, denied) VALUES ('quiet', 'u3', ?, 'c', 2, 1, 1)", d1.String()); err != nil {
		t.Fatal(err)
	}
	truth.add(d1, "quiet", "u3", "c", true)
	truth.add(d1, "quiet", "u3", "c", false)
	// The last second of day 1, recorded but not flushed before midnight.
	e.Clk.Set((d1 + 1).Time().Add(-time.Second))
	truth.record(e, "quiet", "a", "late", true)
	// Day 2 (today once the clock moves on): a little more.
	e.Clk.Advance(time.Hour)
	truth.record(e, "quiet", "a", "u1", true)
	truth.record(e, "busy", "a", "user-7", false)
	day1, day2 := d1.String(), day(e.Clk.Now()).String()
	if n := e.count(t, "SELECT COUNT(*) FROM usage_user_chunks WHERE day = ? AND app_id = 'busy' AND part >> 8 > 0", day1); n == 0 {
		t.Fatal("the busy app's chunks were not split into parts")
	}
	distinct := func() int64 { // of day 1, without the legacy row and the late user
		n := int64(0)
		for app, users := range truth[d1] {
			for user, ifaces := range users {
				n += int64(len(ifaces))
				if app == "quiet" && user == "u3" {
					n-- // its "c" is in usage_user_daily
				}
			}
		}
		return n
	}

	// The late call is still in memory: Rollup seals what was flushed.
	res, err := e.Rec.Rollup.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.SealedDays != 2 {
		t.Fatalf("rollup sealed %d (day, app) pairs, want 2 (busy and quiet on day 1)", res.SealedDays)
	}
	if n := e.count(t, "SELECT COUNT(*) FROM usage_user_chunks WHERE day = ?", day1); n != 0 {
		t.Fatalf("%d chunks of the finished day left after the seal", n)
	}
	if n := e.count(t, "SELECT COALESCE(SUM(entries), 0) FROM usage_user_sealed WHERE day = ?", day1); n != distinct()-1 {
		t.Fatalf("sealed day 1 holds %d entries, want %d (one per user and interface flushed)", n, distinct()-1)
	}
	e.flush() // the late call's chunk, and today's
	if n := e.count(t, "SELECT COUNT(*) FROM usage_user_chunks WHERE day = ?", day2); n == 0 {
		t.Fatal("today's chunks were sealed or never written")
	}
	truth.check(t, e, "after the seal and a late flush of the sealed day")

	res, err = e.Rec.Rollup.Run(ctx)
	if err != nil || res.SealedDays != 1 {
		t.Fatalf("rollup after the late flush: %d (day, app) sealed (%v), want 1 (quiet on day 1)", res.SealedDays, err)
	}
	if n := e.count(t, "SELECT COALESCE(SUM(entries), 0) FROM usage_user_sealed WHERE day = ?", day1); n != distinct() {
		t.Fatalf("sealed day 1 holds %d entries, want %d", n, distinct())
	}
	if n := e.count(t, "SELECT COUNT(*) FROM usage_user_chunks WHERE day = ?", day1); n != 0 {
		t.Fatalf("%d chunks of day 1 left after the second seal", n)
	}
	if n := e.count(t, "SELECT COUNT(*) FROM usage_user_daily"); n != 1 {
		t.Fatalf("usage_user_daily holds %d rows after the seals, want the 1 written before them", n)
	}
	truth.check(t, e, "after the late chunk was sealed")

	e.rollup(t, "a rollup with nothing to seal") // fails if a second one changes anything
	truth.check(t, e, "after a third rollup")
}

// As the day goes on, Rollup merges an app's flush chunks (one per flush,
// each with all of the app's users of that flush) into fewer level-1
// chunks split by user, once it has mergeMinBatches (32) flush batches, so
// a user's query reads a few chunks rather than the whole day's (the
// levels above: userlevels_test.go). Every user's stats stay exact through
// the merge and the seal that follows.
func TestUserChunks_TodaysFlushChunksMergedAsTheDayGoesOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	ctx := context.Background()
	truth := userTruth{}
	for f := range 40 {
		for i := range 30 {
			truth.record(e, "many", fmt.Sprintf("if%d", i%3), fmt.Sprintf("u%d", (f*7+i)%200), i%4 != 0)
		}
		if f < 5 {
			truth.record(e, "few", "if", "u", true)
		}
		e.flush()
		e.Clk.Advance(15 * time.Second)
	}
	level := func(app string, l int) int64 {
		return e.count(t, "SELECT COUNT(*) FROM usage_user_chunks WHERE app_id = ? AND level = ?", app, l)
	}
	if n := level("many", 0); n != 40 {
		t.Fatalf("%d flush chunks of app many, want 40", n)
	}
	truth.check(t, e, "before the merge")
	res, err := e.Rec.Rollup.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.UserMerges != 1 || level("many", 0) != 0 || level("many", 1) == 0 || level("few", 0) != 5 {
		t.Fatalf("%d merges; many: %d flush chunks, %d merged; few: %d flush chunks; want 1; 0, some; 5",
			res.UserMerges, level("many", 0), level("many", 1), level("few", 0))
	}
	truth.check(t, e, "after the merge")

	for i := range 10 {
		truth.record(e, "many", "if0", fmt.Sprintf("u%d", i), true)
	}
	e.flush()
	if res, err = e.Rec.Rollup.Run(ctx); err != nil || res.UserMerges != 0 {
		t.Fatalf("one more flush chunk: %d merges (%v), want 0", res.UserMerges, err)
	}
	truth.check(t, e, "after a flush since the merge")

	e.Clk.Advance(24 * time.Hour)
	if _, err = e.Rec.Rollup.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.count(t, "SELECT COUNT(*) FROM usage_user_chunks"); n != 0 {
		t.Fatalf("%d chunks left after the day was sealed", n)
	}
	truth.check(t, e, "after the seal")
}

// An app with more than 32,768 (user, interface) in a flush has them split
// into 256 parts, today and once sealed, and a query for one user finds its
// figures in its part of either.
func TestUserDay_FindsAUserOfA256PartSplit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	ctx := context.Background()
	truth := userTruth{}
	for i := range 40_000 {
		truth.record(e, "huge", "if", fmt.Sprintf("user-%d", i), i%7 != 0)
	}
	e.flush()
	for _, table := range []string{"usage_user_chunks", "usage_user_sealed"} {
		if table == "usage_user_sealed" {
			e.Clk.Advance(24 * time.Hour)
			if res, err := e.Rec.Rollup.Run(ctx); err != nil || res.SealedDays != 1 {
				t.Fatalf("rollup sealed %d (day, app), want 1: %v", res.SealedDays, err)
			}
		}
		if n := e.count(t, "SELECT COUNT(DISTINCT part) FROM "+table+" WHERE part >> 8 = 8"); n != 256 {
			t.Fatalf("%s: %d parts of 8 bits, want 256", table, n)
		}
		truth.checkSample(t, e, table, 97)
	}
}

// A finished day that cannot be sealed (a corrupt chunk) is reported by
// Rollup, and holds back neither the other apps' seals nor today's merges:
// each Rollup would meet it again until an operator removes the chunk.
func TestRollup_AnUnsealableDayHoldsNothingElseBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	ctx := context.Background()
	truth := userTruth{}
	truth.record(e, "good", "if", "u1", true)
	e.flush()
	if _, err := e.DBs[0].Exec(`INSERT INTO usage_user_chunks (day, app_id, part, batch_id, seq, level, entries, body)
VALUES (?, 'broken', 0, UNHEX(REPEAT('ab', 16)), 0, 0, 1, 'not a snappy body')`, day(e.Clk.Now()).String()); err != nil {
		t.Fatal(err)
	}
	e.Clk.Advance(24 * time.Hour)
	today := day(e.Clk.Now())
	for f := range minFlushBatches {
		truth.record(e, "tiny", "if", fmt.Sprintf("u%d", f%3), true)
		e.flush()
		e.Clk.Advance(15 * time.Second)
	}
	res, err := e.Rec.Rollup.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("rollup error %v, want the broken app's seal reported", err)
	}
	if res.SealedDays != 1 || res.UserMerges != 1 {
		t.Fatalf("rollup sealed %d (day, app) and merged %d times, want 1 (good) and 1 (tiny's flushes)", res.SealedDays, res.UserMerges)
	}
	if l := e.levels(t, "tiny", today); len(l) != 1 || l[1] != 1 {
		t.Fatalf("tiny's batches per level %v, want one of level 1", l)
	}
	truth.check(t, e, "after a rollup with an unsealable day")
}
