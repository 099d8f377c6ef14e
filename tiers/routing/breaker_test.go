package routing_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/routing"
)

// flakyStore is a Store double for the breaker only: it stands in for "a
// store that fails", which is what the breaker reacts to; the stores
// themselves are tested against real Redis / MariaDB.
type flakyStore struct {
	down  bool
	calls int
}

func (f *flakyStore) Tier() tiers.Tier { return tiers.Hot }
func (f *flakyStore) Check(context.Context, time.Time, []*tiers.Op) error {
	f.calls++
	if f.down {
		return fmt.Errorf("dial: %w", tiers.ErrUnavailable)
	}
	return nil
}

func TestBreaker_OpensAfterFailuresAndRecoversThroughAProbe(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	store := &flakyStore{down: true}
	b := routing.NewBreaker(store, clk, 3, 100*time.Millisecond)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if err := b.Check(ctx, clk.Now(), nil); !errors.Is(err, tiers.ErrUnavailable) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if !b.Open() {
		t.Fatal("not open after 3 failures")
	}
	if err := b.Check(ctx, clk.Now(), nil); !errors.Is(err, routing.ErrCircuitOpen) || store.calls != 3 {
		t.Fatalf("open circuit should refuse without calling the store: %v (calls %d)", err, store.calls)
	}
	clk.Advance(100 * time.Millisecond)
	if err := b.Check(ctx, clk.Now(), nil); !errors.Is(err, tiers.ErrUnavailable) || errors.Is(err, routing.ErrCircuitOpen) || store.calls != 4 {
		t.Fatalf("after the cooldown one probe goes through: %v (calls %d)", err, store.calls)
	}
	if !b.Open() {
		t.Fatal("a failed probe should reopen the circuit")
	}
	store.down = false
	clk.Advance(100 * time.Millisecond)
	if err := b.Check(ctx, clk.Now(), nil); err != nil {
		t.Fatalf("probe with the store back: %v", err)
	}
	if b.Open() {
		t.Fatal("a successful probe should close the circuit")
	}
	if err := b.Check(ctx, clk.Now(), nil); err != nil || store.calls != 6 {
		t.Fatalf("closed circuit: %v (calls %d)", err, store.calls)
	}
}

func TestBreaker_NonAvailabilityErrorsDoNotOpenIt(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	b := routing.NewBreaker(errStore{}, clk, 1, time.Second)
	for i := 0; i < 5; i++ {
		_ = b.Check(context.Background(), clk.Now(), nil)
	}
	if b.Open() {
		t.Fatal("a script error is not an outage")
	}
}

type errStore struct{}

func (errStore) Tier() tiers.Tier { return tiers.Hot }
func (errStore) Check(context.Context, time.Time, []*tiers.Op) error {
	return errors.New("ERR script error")
}

// timeoutStore fails as a hung Redis does: after a timeout of its own.
type timeoutStore struct{ err error }

func (timeoutStore) Tier() tiers.Tier { return tiers.Hot }
func (s timeoutStore) Check(context.Context, time.Time, []*tiers.Op) error {
	return fmt.Errorf("%w: %w", tiers.ErrUnavailable, s.err)
}

// One backend timeout opens the circuit at once (a hang costs the checks
// queued behind it one timeout, not three); a caller's own deadline does
// not count as one.
func TestBreaker_OpensOnTheFirstBackendTimeout(t *testing.T) {
	t.Parallel()
	ioTimeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, tc := range []struct {
		name string
		err  error
		open bool
	}{
		{"read timeout", ioTimeout, true},
		{"caller's deadline", context.DeadlineExceeded, false},
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Unix(1_800_000_000, 0))
			b := routing.NewBreaker(timeoutStore{tc.err}, clk, 3, 100*time.Millisecond)
			if err := b.Check(context.Background(), clk.Now(), nil); !errors.Is(err, tiers.ErrUnavailable) {
				t.Fatalf("check: %v", err)
			}
			if b.Open() != tc.open {
				t.Errorf("open after one %s: %v, want %v", tc.name, b.Open(), tc.open)
			}
		})
	}
}
