package analytics

import (
	"fmt"
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A HyperLogLog that the flusher finds past HLLDenseAt bytes is made dense
// (its header's encoding byte 0, 12 KB), keeping its count; one whose users
// only repeat, or with the conversion off, stays sparse (encoding 1).
func TestFlush_BusyHyperLogLogsTurnDenseAndKeepTheirCount(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name            string
		denseAt         int
		users, flushes  int // each flush records every user of 0..users-1 from first
		distinctEach    bool
		wantDense       bool
		wantConversions float64
	}{
		{"300 new users a flush", 256, 300, 2, true, true, 2},
		{"the same 5 users for 120 flushes", 256, 5, 120, false, false, 0},
		{"conversion off", -1, 300, 2, true, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r, _, clk := newShardRecorderWith(t, Options{HLLDenseAt: c.denseAt})
			rdb, prefix := r.rdb, r.opt.KeyPrefix
			distinct := 0
			for f := range c.flushes {
				first := 0
				if c.distinctEach {
					first = f * c.users
				}
				for u := first; u < first+c.users; u++ {
					r.Record("app", "users.get", fmt.Sprint("user-", u), true)
				}
				distinct = max(distinct, first+c.users)
				if err := r.Flush(t.Context()); err != nil {
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
			if got := testutil.ToFloat64(r.met.hllDense); got != c.wantConversions {
				t.Errorf("quota_analytics_hll_dense_total %v, want %v", got, c.wantConversions)
			}
		})
	}
}

// Conversions go in pipelines of convertChunk keys: every key of a flush
// that brings many busy keys at once (the first minute of a day) is
// converted, over several pipelines.
func TestFlush_ManyBusyHyperLogLogsAllTurnDense(t *testing.T) {
	t.Parallel()
	r, _, clk := newShardRecorderWith(t, Options{HLLDenseAt: 256})
	rdb, prefix := r.rdb, r.opt.KeyPrefix
	const apps = 2*convertChunk + 3
	for a := range apps {
		for u := range 300 {
			r.Record(fmt.Sprint("app-", a), "users.get", fmt.Sprint("user-", u), true)
		}
	}
	if err := r.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(r.met.hllDense); got != 2*apps {
		t.Errorf("%v keys converted, want %d (an app and an interface key per app)", got, 2*apps)
	}
	day := DayOf(clk.Now())
	for a := range apps {
		k := hllKey{app: fmt.Sprint("app-", a), scope: scopeApp, day: day}
		if n := rdb.StrLen(t.Context(), k.redisKey(prefix)).Val(); n != hllDenseSize {
			t.Errorf("app-%d: %d bytes, want dense (%d)", a, n, hllDenseSize)
		}
	}
}

// A key that Redis lost after the flusher made it dense (a restart) is
// re-made sparse by the next PFADD; the flusher asks its size again when
// it next sets the key's TTL (once an expireEvery) and converts it again,
// rather than trusting its note until the day is over.
func TestFlush_LostDenseHyperLogLogIsConvertedAgain(t *testing.T) {
	t.Parallel()
	r, _, clk := newShardRecorderWith(t, Options{HLLDenseAt: 256})
	rdb := r.rdb
	k := hllKey{app: "app", iface: "users.get", scope: scopeIface, day: DayOf(clk.Now())}
	rk := k.redisKey(r.opt.KeyPrefix)
	next := 0
	flushNewUsers := func() {
		t.Helper()
		for range 300 {
			r.Record("app", "users.get", fmt.Sprint("user-", next), true)
			next++
		}
		if err := r.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	flushNewUsers()
	flushNewUsers()
	if n := rdb.StrLen(t.Context(), rk).Val(); n != hllDenseSize {
		t.Fatalf("%s: %d bytes before the loss, want dense (%d)", rk, n, hllDenseSize)
	}
	rdb.Del(t.Context(), rk) // Redis restarted without its data
	clk.Advance(r.expireEvery())
	flushNewUsers() // re-creates the key sparse and sets its TTL again
	if n := rdb.StrLen(t.Context(), rk).Val(); n >= hllDenseSize {
		t.Fatalf("%s: %d bytes right after the loss, want sparse (the test would prove nothing)", rk, n)
	}
	flushNewUsers() // asks its size, converts it
	if n := rdb.StrLen(t.Context(), rk).Val(); n != hllDenseSize {
		t.Errorf("%s: %d bytes, want dense (%d) again", rk, n, hllDenseSize)
	}
	if got := rdb.PFCount(t.Context(), rk).Val(); math.Abs(float64(got-600)) > 0.02*600 {
		t.Errorf("%s: %d distinct users, want the 600 added since the loss, within 2%%", rk, got)
	}
}
