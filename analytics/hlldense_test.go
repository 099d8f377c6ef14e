package analytics

import (
	"fmt"
	"math"
	"testing"
)

// A HyperLogLog past HLLDenseAt bytes (1,000 by default; Redis' own is
// 3,000) is made dense (its header's encoding byte 0, 12 KB), keeping its
// count; one whose users only repeat stays sparse (encoding 1).
func TestFlush_BusyHyperLogLogsTurnDenseAndKeepTheirCount(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		users, flushes int // each flush records every user of 0..users-1 from first
		distinctEach   bool
		wantDense      bool
	}{
		{"300 new users a flush", 300, 2, true, true},
		{"the same 5 users for 120 flushes", 5, 120, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r, _, clk := newShardRecorder(t)
			rdb, prefix := r.Flusher.uniq.rdb, r.Flusher.opt.KeyPrefix
			distinct := 0
			for f := range c.flushes {
				first := 0
				if c.distinctEach {
					first = f * c.users
				}
				for u := first; u < first+c.users; u++ {
					r.Recorder.Record("app", "users.get", fmt.Sprint("user-", u), true)
				}
				distinct = max(distinct, first+c.users)
				if err := r.Flusher.Flush(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			day := DayOf(clk.Now())
			for _, k := range []hllKey{
				{app: "app", scope: scopeApp, day: day},
				{app: "app", iface: "users.get", scope: scopeIface, day: day},
			} {
				rk := k.redisKey(prefix)
				v, err := rdb.Get(t.Context(), rk).Bytes()
				if err != nil {
					t.Fatal(err)
				}
				if dense := len(v) == hllDenseSize && v[4] == 0; dense != c.wantDense {
					t.Errorf("%s: %d bytes, encoding %d; want dense %v", rk, len(v), v[4], c.wantDense)
				}
				got := rdb.PFCount(t.Context(), rk).Val()
				if math.Abs(float64(got-int64(distinct))) > 0.02*float64(distinct) {
					t.Errorf("%s: %d distinct users, want %d within 2%%", rk, got, distinct)
				}
			}
		})
	}
}

// A key that Redis lost after it was made dense (a restart) is re-made
// sparse by the next PFADD, and dense again once it passes HLLDenseAt.
func TestFlush_LostDenseHyperLogLogIsConvertedAgain(t *testing.T) {
	t.Parallel()
	r, _, clk := newShardRecorder(t)
	rdb := r.Flusher.uniq.rdb
	k := hllKey{app: "app", iface: "users.get", scope: scopeIface, day: DayOf(clk.Now())}
	rk := k.redisKey(r.Flusher.opt.KeyPrefix)
	next := 0
	flushNewUsers := func() {
		t.Helper()
		for range 300 {
			r.Recorder.Record("app", "users.get", fmt.Sprint("user-", next), true)
			next++
		}
		if err := r.Flusher.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	flushNewUsers()
	flushNewUsers()
	if n := rdb.StrLen(t.Context(), rk).Val(); n != hllDenseSize {
		t.Fatalf("%s: %d bytes before the loss, want dense (%d)", rk, n, hllDenseSize)
	}
	rdb.Del(t.Context(), rk) // Redis restarted without its data
	clk.Advance(r.Flusher.uniq.expireEvery())
	flushNewUsers() // re-creates the key sparse and sets its TTL again
	if n := rdb.StrLen(t.Context(), rk).Val(); n >= hllDenseSize {
		t.Fatalf("%s: %d bytes right after the loss, want sparse (the test would prove nothing)", rk, n)
	}
	flushNewUsers() // past HLLDenseAt: Redis makes it dense
	if n := rdb.StrLen(t.Context(), rk).Val(); n != hllDenseSize {
		t.Errorf("%s: %d bytes, want dense (%d) again", rk, n, hllDenseSize)
	}
	if got := rdb.PFCount(t.Context(), rk).Val(); math.Abs(float64(got-600)) > 0.02*600 {
		t.Errorf("%s: %d distinct users, want the 600 added since the loss, within 2%%", rk, got)
	}
}

// hllDenseSize is the length of a dense HyperLogLog: a 16-byte header and
// 16,384 6-bit registers.
const hllDenseSize = 16 + 16384*6/8
