package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers/hot"
)

// A batch holding a cached denial whose open cell is read and other
// checks costs one Redis round trip: the read goes ahead of the checks in
// their pipeline. When the denial shares a cell with a check after it, the
// read goes first on its own (two), and when a check before it counts in
// its open cell, it is checked with them, not read (one): each check is
// answered as if sent alone, in order.
func TestDenials_ABatchReadsAndChecksInOneRoundTrip(t *testing.T) {
	t.Parallel()
	set, err := rules.NewSet([]rules.Rule{
		{Name: "per_user", Dimensions: []string{"user_id"}, Limit: 1, Window: rules.Duration(time.Hour), Algorithm: rules.FixedWindow},
		{Name: "per_ip", Dimensions: []string{"ip"}, Limit: 100, Window: rules.Duration(time.Hour), Algorithm: rules.FixedWindow},
	})
	if err != nil {
		t.Fatal(err)
	}
	rdb, prefix := testenv.Redis(t)
	calls := &testenv.RedisCalls{}
	rdb.AddHook(calls)
	clk := clock.NewFake(time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC))
	l, err := limiter.New(hot.NewStore(rdb, hot.Options{Prefix: prefix}), clk, set)
	if err != nil {
		t.Fatal(err)
	}
	denials := limiter.NewDenials(1000)
	l.UseDenials(denials)
	ctx := context.Background()
	user := func(ip, u string) *limiter.Request {
		return &limiter.Request{Dims: dims("ip", ip, "user_id", u), Cost: 1}
	}
	flooder := user("x", "f")
	for range 2 { // the second is denied and cached, its IP cell open
		if _, err := l.Check(ctx, flooder); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name      string
		batch     []*limiter.Request
		at        int   // the flooder's place
		ipLeft    int64 // its IP cell's remaining
		trips     int64
		read      bool // its IP cell read, not checked
		otherLeft int64
	}{
		{"another IP after it", []*limiter.Request{flooder, user("y", "u1")}, 0, 99, 1, true, 99},
		{"its IP after it", []*limiter.Request{flooder, user("x", "u2")}, 0, 99, 2, true, 98},
		{"its IP before it", []*limiter.Request{user("x", "u3"), flooder}, 1, 97, 1, false, 97},
	} {
		peeks := denials.Peeks()
		calls.Reset()
		ds, err := l.CheckBatch(ctx, tt.batch)
		if err != nil {
			t.Fatal(err)
		}
		other := 1 - tt.at
		if trips := calls.Trips.Load(); trips != tt.trips {
			t.Errorf("%s: %d Redis round trips, want %d", tt.name, trips, tt.trips)
		}
		if d := ds[tt.at]; d.Allowed || d.Entries[1].Remaining != tt.ipLeft {
			t.Errorf("%s: the flooder got %+v, want denied with %d left on its IP", tt.name, d, tt.ipLeft)
		}
		if d := ds[other]; !d.Allowed || d.Entries[1].Remaining != tt.otherLeft {
			t.Errorf("%s: the other got %+v, want allowed with %d left on its IP", tt.name, d, tt.otherLeft)
		}
		if read := denials.Peeks() > peeks; read != tt.read {
			t.Errorf("%s: the flooder's IP cell read: %v, want %v", tt.name, read, tt.read)
		}
	}
}
