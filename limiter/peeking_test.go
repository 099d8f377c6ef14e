package limiter_test

import (
	"context"
	"testing"

	"github.com/quota-platform/quota/internal/testsupport/denialrig"
	"github.com/quota-platform/quota/limiter"
)

// A batch holding a cached denial whose open cell is read and other
// checks costs one Redis round trip: the read goes ahead of the checks in
// their pipeline. When the denial shares a cell with a check after it, the
// read goes first on its own (two), and when a check before it counts in
// its open cell, it is checked with them, not read (one): each check is
// answered as if sent alone, in order.
func TestDenials_ABatchReadsAndChecksInOneRoundTrip(t *testing.T) {
	t.Parallel()
	rig := denialrig.New(t, nil)
	user, flooder := denialrig.User, rig.Flooder
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
		peeks := rig.Denials.Peeks()
		rig.Calls.Reset()
		ds, err := rig.Limiter.CheckBatch(context.Background(), tt.batch)
		if err != nil {
			t.Fatal(err)
		}
		other := 1 - tt.at
		if trips := rig.Calls.Trips.Load(); trips != tt.trips {
			t.Errorf("%s: %d Redis round trips, want %d", tt.name, trips, tt.trips)
		}
		if d := ds[tt.at]; d.Allowed || d.Entries[1].Remaining != tt.ipLeft {
			t.Errorf("%s: the flooder got %+v, want denied with %d left on its IP", tt.name, d, tt.ipLeft)
		}
		if d := ds[other]; !d.Allowed || d.Entries[1].Remaining != tt.otherLeft {
			t.Errorf("%s: the other got %+v, want allowed with %d left on its IP", tt.name, d, tt.otherLeft)
		}
		if read := rig.Denials.Peeks() > peeks; read != tt.read {
			t.Errorf("%s: the flooder's IP cell read: %v, want %v", tt.name, read, tt.read)
		}
	}
}
