package analytics

import (
	"database/sql"
	"hash/maphash"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/clock"
)

// Rows whose hashes are all equal (same home slot, same tag) are still told
// apart by their keys: ids and minutes.
func TestLiveTable_EqualHashesAreToldApartByKey(t *testing.T) {
	t.Parallel()
	var tab liveTable
	var keys []liveKey
	seed := maphash.MakeSeed()
	const h = 0x0123456789abcdef
	for _, n := range []int{1, 2, 20} {
		tab, keys = liveTable{}, nil
		for j := range n {
			id := []byte("row-" + strconv.Itoa(j/2))
			min := int64(j%2) * 60
			if i, _ := tab.find(h, id, min, keys); i >= 0 {
				t.Fatalf("n=%d: row %d found before it was added (as %d)", n, j, i)
			}
			_, slot := tab.find(h, id, min, keys)
			keys = append(keys, liveKey{id: rowID(id), min: min})
			tab.insert(slot, h, int32(j), keys, seed)
		}
		for j := range n {
			if i, _ := tab.find(h, []byte("row-"+strconv.Itoa(j/2)), int64(j%2)*60, keys); i != int32(j) {
				t.Fatalf("n=%d: row %d found as %d", n, j, i)
			}
		}
	}
}

// Record through the live tables, as they grow from empty, counts each call
// once to its (app, interface, user, minute) row, and take leaves tables that
// count the next rows afresh.
func TestLiveTable_RecordCountsEachRowExactly(t *testing.T) {
	t.Parallel()
	db, _ := sql.Open("mysql", "nobody:x@tcp(127.0.0.1:1)/none")
	defer db.Close()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for _, shards := range []int{1, 64} {
		clk := clock.NewFake(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
		r, err := New(Options{DBs: []*sql.DB{db}, Redis: rdb, Clock: clk, LiveShards: shards, MaxPendingRows: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		for round := range 2 {
			want := map[liveKey]Counts{}
			rnd := newXorshift()
			for i := range 100_000 {
				x := rnd.Next()
				app, iface, user := "app-"+strconv.Itoa(int(x%7)), "if-"+strconv.Itoa(int(x>>8%5)), "user-"+strconv.Itoa(int(x>>16%3000))
				if i%25_000 == 0 {
					clk.Advance(time.Minute)
				}
				allowed := x>>40%3 != 0
				r.Record(app, iface, user, allowed)
				k := liveKey{id: makeRowID(app, iface, user), min: floorDiv(clk.Now().Unix(), 60) * 60}
				c := want[k]
				c.add(Counts{Calls: 1, Allowed: map[bool]int64{true: 1}[allowed], Denied: map[bool]int64{false: 1}[allowed]})
				want[k] = c
			}
			got := map[liveKey]Counts{}
			for i := range r.live {
				rows := r.live[i].take(liveRows{})
				for j, k := range rows.keys {
					if _, dup := got[k]; dup {
						t.Fatalf("shards=%d round %d: row %+v twice", shards, round, k)
					}
					got[k] = rows.counts[j]
				}
			}
			if len(got) != len(want) {
				t.Fatalf("shards=%d round %d: %d rows, want %d", shards, round, len(got), len(want))
			}
			for k, c := range want {
				if got[k] != c {
					t.Fatalf("shards=%d round %d: %+v counts %+v, want %+v", shards, round, k, got[k], c)
				}
			}
		}
	}
}
