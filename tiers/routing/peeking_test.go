package routing

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/hot"
)

// A batch's reads of cached denials' open cells and its checks cost one
// Redis round trip: an MGET ahead of the check scripts in their pipeline,
// reading what PeekFixed would (a cell with a hot key is found, a new one
// is not), before any check counts: a check in the batch that counts in a
// read cell is not seen by the read.
func TestRouter_PeeksAndChecksGoInOneRoundTrip(t *testing.T) {
	t.Parallel()
	r, calls, mysqlTrips := filterRouter(t)
	ctx := context.Background()
	counted, fresh := newConfCell(10, time.Hour), newConfCell(10, time.Hour)
	routerCheck(t, r, confOp(confT0, 3, tiers.Enforce, counted))

	denied := confOp(confT0, 1, tiers.Enforce, counted, fresh)
	denied.ResetOut()
	peeks := []tiers.FixedPeek{{Op: denied, Cell: 0}, {Op: denied, Cell: 1}}
	again := confOp(confT0, 2, tiers.Enforce, counted)
	other := confOp(confT0, 1, tiers.Enforce, newConfCell(10, time.Hour))
	mysqlTrips()
	calls.Reset()
	var decided []int
	readErr, err := r.CheckEachPeeking(ctx, confT0, peeks, []*tiers.Op{again, other}, func(i int, err error) {
		if err != nil {
			t.Errorf("op %d: %v", i, err)
		}
		decided = append(decided, i)
	})
	if readErr != nil || err != nil {
		t.Fatalf("read %v, check %v", readErr, err)
	}
	if trips := calls.Trips.Load(); trips != 1 {
		t.Errorf("%d Redis round trips, want 1", trips)
	}
	if n := mysqlTrips(); n != 0 {
		t.Errorf("%d MySQL round trips, want 0", n)
	}
	if len(decided) != 2 {
		t.Fatalf("ops decided %v, want both", decided)
	}
	if !peeks[0].Found || denied.Out[0].Remaining != 7 || !denied.Out[0].Allowed {
		t.Errorf("the counted cell's read: found %v %+v, want 7 left (3 of 10 counted before the batch)", peeks[0].Found, denied.Out[0])
	}
	if peeks[1].Found {
		t.Errorf("a cell with no hot key was found: %+v", denied.Out[1])
	}
	if !again.Committed || again.Out[0].Remaining != 5 || !other.Committed || other.Out[0].Remaining != 9 {
		t.Errorf("the checks: %v %+v, %v %+v; want 5 and 9 left", again.Committed, again.Out, other.Committed, other.Out)
	}
}

// Through a breaker, the reads and the checks are one call of the store:
// one round trip while it is closed, failures of either counting as one,
// and nothing sent while it is open (the reads then fail with the checks).
func TestBreaker_PeeksAndChecksAreOneCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, calls, _ := filterRouter(t)
	b := NewBreaker(r, clock.NewFake(confT0), 2, time.Minute)
	cell := newConfCell(10, time.Hour)
	routerCheck(t, r, confOp(confT0, 4, tiers.Enforce, cell))
	denied := confOp(confT0, 1, tiers.Enforce, cell)
	denied.ResetOut()
	peeks := []tiers.FixedPeek{{Op: denied, Cell: 0}}
	calls.Reset()
	readErr, err := b.CheckEachPeeking(ctx, confT0, peeks, []*tiers.Op{confOp(confT0, 1, tiers.Enforce, newConfCell(10, time.Hour))}, func(int, error) {})
	if readErr != nil || err != nil || !peeks[0].Found || denied.Out[0].Remaining != 6 {
		t.Fatalf("read %v, check %v, found %v %+v; want 6 left", readErr, err, peeks[0].Found, denied.Out[0])
	}
	if trips := calls.Trips.Load(); trips != 1 {
		t.Errorf("%d Redis round trips, want 1", trips)
	}

	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { dead.Close() })
	down := NewBreaker(hot.NewStore(dead, hot.Options{Prefix: "dead:"}), clock.NewFake(confT0), 2, time.Minute)
	for call := range 3 {
		peeks[0].Found = false
		var failed int
		readErr, err := down.CheckEachPeeking(ctx, confT0, peeks, []*tiers.Op{confOp(confT0, 1, tiers.Enforce, newConfCell(10, time.Hour))}, func(_ int, err error) {
			if err != nil {
				failed++
			}
		})
		open := call == 2
		if !errors.Is(readErr, tiers.ErrUnavailable) || !errors.Is(err, tiers.ErrUnavailable) || failed != 1 || peeks[0].Found {
			t.Fatalf("call %d to a dead Redis: read %v, check %v, %d ops failed, found %v", call, readErr, err, failed, peeks[0].Found)
		}
		if errors.Is(err, ErrCircuitOpen) != open || errors.Is(readErr, ErrCircuitOpen) != open {
			t.Fatalf("call %d: read %v, check %v; want the circuit open only after 2 failed calls", call, readErr, err)
		}
	}
}
