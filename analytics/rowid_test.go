package analytics

import (
	"database/sql"
	"encoding/binary"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// makeRowID is the rowID of (app, iface, user), as Record makes it.
func makeRowID(app, iface, user string) rowID { return rowID(appendRowID(nil, app, iface, user)) }

func TestRowIDRoundTrip(t *testing.T) { // not parallel: AllocsPerRun
	long := func(n int, c byte) string { return strings.Repeat(string([]byte{c}), n) }
	cases := []struct{ name, app, iface, user string }{
		{"all empty", "", "", ""},
		{"no user", "app-1", "iface.2", ""},
		{"no interface", "app-1", "", "user-3"},
		{"no app", "", "iface.2", "user-3"},
		{"one byte", "a", "b", "c"},
		{"typical", "app-123", "iface.45", "user-67890"},
		{"127 bytes", long(127, 'a'), long(127, 'i'), long(127, 'u')},
		{"128 bytes", long(128, 'a'), long(128, 'i'), long(128, 'u')},
		{"300 bytes", long(300, 'a'), long(300, 'i'), long(300, 'u')},
		{"mixed lengths", long(128, 'a'), "", long(300, 'u')},
		{"mixed lengths 2", "", long(300, 'i'), "x"},
		{"NUL", "\x00", "a\x00b", "\x00\x00"},
		{"0xff", "\xff", "\xff\xfe", "u\xff"},
		{"0x80 and 0x7f", "\x80", "\x7f", "\x80\x7f"},
		{"separators", "a|b", "|", "||u|"},
		{"length-like bytes", "\x01", "\x02\x03", "\x01\x00"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := makeRowID(c.app, c.iface, c.user)
			if got := id.app(); got != c.app {
				t.Errorf("app() = %q, want %q", got, c.app)
			}
			if got := id.iface(); got != c.iface {
				t.Errorf("iface() = %q, want %q", got, c.iface)
			}
			if got := id.user(); got != c.user {
				t.Errorf("user() = %q, want %q", got, c.user)
			}
			if a, f, u := id.split(); a != c.app || f != c.iface || u != c.user {
				t.Errorf("split() = %q, %q, %q", a, f, u)
			}
			// The documented encoding, as encoding/binary reads it.
			b := []byte(id)
			n, k := binary.Uvarint(b)
			if k <= 0 || n != uint64(len(c.app)) || string(b[k:k+int(n)]) != c.app {
				t.Fatalf("app field: len %d (%d bytes)", n, k)
			}
			b = b[k+int(n):]
			n, k = binary.Uvarint(b)
			if k <= 0 || n != uint64(len(c.iface)) || string(b[k:k+int(n)]) != c.iface {
				t.Fatalf("iface field: len %d (%d bytes)", n, k)
			}
			if string(b[k+int(n):]) != c.user {
				t.Fatalf("user field %q", b[k+int(n):])
			}
			if again := makeRowID(strings.Clone(c.app), strings.Clone(c.iface), strings.Clone(c.user)); again != id {
				t.Errorf("not canonical: %q, %q", id, again)
			}
			// Record encodes into a stack buffer: with room, no allocation.
			buf := make([]byte, 0, len(id))
			if got := testing.AllocsPerRun(10, func() { _ = appendRowID(buf[:0], c.app, c.iface, c.user) }); got != 0 {
				t.Errorf("appendRowID into a buffer with room: %v allocations, want 0", got)
			}
		})
	}
}

// Triples that naive concatenation (with or without a separator that can
// occur in the values) would confuse get different ids.
func TestRowIDDistinguishesTriples(t *testing.T) {
	t.Parallel()
	pairs := [][2][3]string{
		{{"ab", "c", "d"}, {"a", "bc", "d"}},
		{{"a", "b", "cd"}, {"a", "bc", "d"}},
		{{"a", "", "bc"}, {"a", "b", "c"}},
		{{"", "a", "b"}, {"a", "", "b"}},
		{{"a|b", "c", "d"}, {"a", "b|c", "d"}},
		{{"a\x00", "b", "c"}, {"a", "\x00b", "c"}},
		{{"\x01a", "", ""}, {"", "a", ""}}, // a length byte inside a value
		{{strings.Repeat("x", 128), "", ""}, {strings.Repeat("x", 127), "x", ""}},
	}
	for _, p := range pairs {
		a, b := p[0], p[1]
		if makeRowID(a[0], a[1], a[2]) == makeRowID(b[0], b[1], b[2]) {
			t.Errorf("%+q and %+q have the same id", a, b)
		}
	}
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
	if k.id.app() != app || k.id.iface() != iface || k.id.user() != user || c.Calls != 102 {
		t.Errorf("live row %+q %+v", []string{k.id.app(), k.id.iface(), k.id.user()}, c)
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
			got = append(got, k.id.user()+":"+strconv.FormatInt(c.Calls, 10))
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
