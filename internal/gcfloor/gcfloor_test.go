package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
)

func percent() int {
	s := []metrics.Sample{{Name: percentMetric}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

const mib = 1 << 20

func TestPercent(t *testing.T) {
	for _, tc := range []struct {
		name               string
		live, roots, floor uint64
		base, want         int
	}{
		{"GOGC=off is left off", 10 * mib, 0, 128 * mib, -1, -1},
		{"no floor", 10 * mib, 0, 0, 100, 100},
		{"no collection yet", 0, 0, 128 * mib, 100, 100},
		{"a small heap grows to the floor", 16 * mib, 0, 128 * mib, 100, 700},
		{"roots count in the goal", 16 * mib, 16 * mib, 128 * mib, 100, 350},
		{"GOGC's goal already above the floor", 80 * mib, 0, 128 * mib, 100, 100},
		{"never below GOGC", 60 * mib, 0, 128 * mib, 200, 200},
		{"a tiny heap: the runtime's minimum goal stays at the floor", 64 << 10, 0, 128 * mib, 100, 3200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percent(tc.live, tc.roots, tc.floor, tc.base); got != tc.want {
				t.Fatalf("Percent(%d, %d, %d, %d) = %d, want %d", tc.live, tc.roots, tc.floor, tc.base, got, tc.want)
			}
		})
	}
}

// After a collection the percent in force is the floor's, and Stop puts
// back the one Start found.
func TestStart_TunesAfterACollectionAndStopRestores(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	f := Start(256 * mib)
	// Start tunes at once; put the percent back so that only a tuning
	// after a collection can raise it again.
	debug.SetGCPercent(100)
	runtime.GC()
	runtime.GC() // the first cycle queues the finalizer; it has run by the time the second has queued the next
	var got int
	for range 1000 {
		if got = percent(); got > 100 {
			break
		}
		runtime.Gosched()
	}
	f.Stop()
	if got <= 100 {
		t.Fatalf("percent after collections %d, want above 100 with a 256 MiB floor and a test's heap", got)
	}
	if p := percent(); p != 100 {
		t.Fatalf("percent after Stop %d, want 100", p)
	}
}

// With GOGC=off there is no percent to raise: Start leaves it off.
func TestStart_LeavesGOGCOffAlone(t *testing.T) {
	old := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(old)
	f := Start(256 * mib)
	runtime.GC()
	runtime.GC()
	f.Stop()
	if p := debug.SetGCPercent(-1); p != -1 {
		t.Fatalf("percent %d after Start and Stop with GOGC=off, want -1 (off)", p)
	}
}
