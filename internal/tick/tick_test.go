package tick

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// Every calls its function on the period and returns once the context
// ends, without a call after: the call that ends it outlasts the period,
// so a tick is ready beside the end, 20 times over.
func TestEvery_CallsUntilTheContextEnds(t *testing.T) {
	t.Parallel()
	for range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		var calls atomic.Int64
		done := make(chan struct{})
		go func() {
			defer close(done)
			Every(ctx, time.Millisecond, func() {
				if calls.Add(1) == 3 {
					time.Sleep(3 * time.Millisecond)
					cancel()
				}
			})
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Every did not return after its context ended")
		}
		if n := calls.Load(); n != 3 {
			t.Fatalf("%d calls, want 3 (the third cancelled)", n)
		}
	}
}
