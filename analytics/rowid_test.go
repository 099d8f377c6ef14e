package analytics

import (
	"database/sql"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/analytics/usage"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// makeRowID is the usage.RowID of (app, iface, user), as Record makes it.
func makeRowID(app, iface, user string) usage.RowID {
	return usage.RowID(usage.AppendRowID(nil, app, iface, user))
}

// Record of a call to an existing row allocates nothing (the live map is
// looked up with the id on the stack); a new row allocates its id only.
func TestRecordExistingRowDoesNotAllocate(t *testing.T) {
	r := newOfflineRecorder(t, Options{})
	app, iface, user := "app-1", "iface.2", "user-3"
	r.Recorder.Record(app, iface, user, true)
	if got := testing.AllocsPerRun(100, func() { r.Recorder.Record(app, iface, user, true) }); got != 0 {
		t.Errorf("Record of an existing row: %v allocations, want 0", got)
	}
	var k liveKey
	var c Counts
	for i := range r.Recorder.shards {
		r.Recorder.shards[i].rows.each(func(kk liveKey, cc Counts) { k, c = kk, cc })
	}
	if k.id.App() != app || k.id.Iface() != iface || k.id.User() != user || c.Calls != 102 {
		t.Errorf("live row %+q %+v", []string{k.id.App(), k.id.Iface(), k.id.User()}, c)
	}
}

// A live shard's rows come out of take summed per row, the shard is left
// empty, and the map put back becomes the shard's at the next take, so
// flushes reuse two maps instead of allocating anew.
func TestLiveShard_TakeReturnsEveryRowAndReusesTheSpare(t *testing.T) {
	t.Parallel()
	r := newOfflineRecorder(t, Options{LiveShards: 1})
	users := []string{"u9", "u1", "u5", "u1", "u3"}
	l := &r.Recorder.shards[0]
	var put map[liveKey]int32
	for round := range 3 {
		for _, u := range users {
			r.Recorder.Record("app", "if", u, true)
		}
		rows := r.Recorder.take(0)
		var got []string
		rows.each(func(k liveKey, c Counts) {
			got = append(got, k.id.User()+":"+strconv.FormatInt(c.Calls, 10))
		})
		slices.Sort(got)
		if want := []string{"u1:2", "u3:1", "u5:1", "u9:1"}; !slices.Equal(got, want) {
			t.Fatalf("round %d: took %v, want %v", round, got, want)
		}
		if len(l.rows.keys) != 0 || len(l.rows.index) != 0 {
			t.Fatalf("round %d: the shard holds %d rows after take", round, len(l.rows.keys))
		}
		if put != nil && reflect.ValueOf(l.rows.index).UnsafePointer() != reflect.ValueOf(put).UnsafePointer() {
			t.Fatalf("round %d: the shard did not take over the map put back", round)
		}
		r.Recorder.putBack(0, rows)
		put = rows.index
	}
}

// newShardRecorder is a Recorder over one fresh shard database and a Redis
// prefix of the test's own, on a fake clock at 2026-11-23 10:00 UTC; it
// returns the shard too.
func newShardRecorder(t *testing.T) (*Analytics, *sql.DB, *clock.Fake) {
	t.Helper()
	return newShardRecorderWith(t, Options{})
}

// newShardRecorderWith is newShardRecorder with o's settings (its servers
// and clock are set here).
func newShardRecorderWith(t *testing.T, o Options) (*Analytics, *sql.DB, *clock.Fake) {
	t.Helper()
	dbs := testenv.MySQLShards(t, 1)
	rdb, prefix := testenv.Redis(t)
	clk := clock.NewFake(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	o.DBs, o.Redis, o.KeyPrefix, o.Clock = dbs, rdb, prefix, clk
	r, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return r, dbs[0], clk
}

// newOfflineRecorder is a Recorder over servers that are not there, on a
// fake clock: for tests of what Record and the fold do in memory (Record
// does no I/O).
func newOfflineRecorder(t *testing.T, o Options) *Analytics {
	t.Helper()
	db, err := sql.Open("mysql", "nobody:x@tcp(127.0.0.1:1)/none")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { rdb.Close() })
	o.DBs, o.Redis = []*sql.DB{db}, rdb
	o.Clock = clock.NewFake(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	r, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
