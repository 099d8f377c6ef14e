package analytics

import (
	"math"
	"strings"
	"testing"
)

// The live rows are indexed with 32 bits: New refuses a bound on the
// pending rows past that.
func TestNew_RefusesAPendingBoundPastTheSortIndexes(t *testing.T) {
	t.Parallel()
	ok := newOfflineRecorder(t, Options{MaxPendingRows: math.MaxInt32})
	if _, err := New(Options{DBs: ok.Flusher.opt.DBs, Redis: ok.Flusher.uniq.rdb, MaxPendingRows: math.MaxInt32 + 1}); err == nil ||
		!strings.Contains(err.Error(), "MaxPendingRows") {
		t.Fatalf("New with MaxPendingRows past MaxInt32: %v, want an error naming it", err)
	}
}
