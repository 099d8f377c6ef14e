//go:build !race

// Allocation counts, which the race detector's own allocations would
// spoil: this file is left out of `go test -race`, and `make test` runs its
// tests again without -race (it finds every test of a `//go:build !race`
// file), so CI runs them.

package loadgen

import (
	"testing"
	"time"
)

func TestRawWorkerAllocatesNothingPerRequest(t *testing.T) {
	addr := tinyServer(t, tinyAnswer)
	w := testWorker(t, "http://"+addr, ClientRaw, 0)
	for range 100 { // warm up: buffers, the histogram's first values
		w.do(time.Now())
	}
	allocs := testing.AllocsPerRun(2000, func() { w.do(time.Now()) })
	if allocs != 0 {
		t.Errorf("%.2f allocations per request, want 0", allocs)
	}
	if w.allowed.Load() != w.requests.Load() || w.tiers["hot"] == nil {
		t.Errorf("%d of %d allowed (errors %v %v)", w.allowed.Load(), w.requests.Load(), w.kinds, w.statuses)
	}
}
