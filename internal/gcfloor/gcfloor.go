// Package gcfloor keeps the garbage collector's heap goal at or above a
// floor. Go starts a collection when the heap has grown by GOGC percent
// of what the last one left live, so a server whose live heap is small
// collects many times a second under a steady allocation rate, and each
// collection takes a share of the CPU for its mark phase and slows the
// goroutines that allocate meanwhile (mark assists): on a machine with few
// cores that is a burst of latency for the requests in flight, paid again
// at every cycle. With a floor the heap may grow to the floor before the
// next collection; once GOGC's own goal is above the floor it is left as
// it is, so the floor bounds the extra memory.
package gcfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// The heap the last collection marked live, the roots it scanned, and the
// percent in force.
const (
	liveMetric    = "/gc/heap/live:bytes"
	stacksMetric  = "/gc/scan/stack:bytes"
	globalsMetric = "/gc/scan/globals:bytes"
	percentMetric = "/gc/gogc:percent"
)

// heapMinimum is the runtime's least heap goal at GOGC=100; it scales
// with the percent, so a percent above floor/heapMinimum*100 would make it
// the goal, above the floor.
const heapMinimum = 4 << 20

// Percent is the GC percent that makes the next collection start at about
// floor bytes of heap, given what the last one left: live heap and roots
// (goroutine stacks and globals, which the runtime's goal counts too:
// live + (live+roots)*percent/100), and base, the percent in force without
// a floor; base when base's own goal already reaches the floor.
func Percent(live, roots, floor uint64, base int) int {
	if base < 0 || floor == 0 || live == 0 { // live 0: no collection yet
		return base
	}
	scanned := float64(live + roots)
	if float64(live)+scanned*float64(base)/100 >= float64(floor) {
		return base
	}
	p := math.Ceil((float64(floor) - float64(live)) * 100 / scanned)
	p = min(p, math.Floor(float64(floor)*100/heapMinimum))
	return int(max(p, float64(base)))
}

// Floor tunes the GC percent after every collection (Percent); Stop
// restores the percent it found.
type Floor struct {
	floor   uint64
	base    int
	stopped atomic.Bool
	mu      sync.Mutex // orders a tuning against Stop's restore
	sample  [3]metrics.Sample
}

// Start keeps the heap goal at or above floor bytes from the next
// collection on, taking the percent in force (GOGC's) as the base.
// With GOGC=off, or a floor of 0, it changes nothing. GOMEMLIMIT still
// bounds the heap: the runtime collects at the memory limit whatever the
// percent.
func Start(floor uint64) *Floor {
	f := &Floor{floor: floor}
	s := []metrics.Sample{{Name: percentMetric}}
	metrics.Read(s)
	f.base = -1 // GOGC=off: the metric reads as -1 converted to uint64
	if p := s[0].Value.Uint64(); p <= math.MaxInt32 {
		f.base = int(p)
	}
	f.sample[0].Name, f.sample[1].Name, f.sample[2].Name = liveMetric, stacksMetric, globalsMetric
	if f.base < 0 || floor == 0 {
		f.stopped.Store(true)
		return f
	}
	f.tune()
	f.arm()
	return f
}

// sentinel holds a pointer so that it is never placed in the runtime's
// tiny-object blocks, whose finalizers may never run.
type sentinel struct{ _ *Floor }

// arm sets a finalizer on a fresh object: it runs after the next
// collection, which finds the object unreachable, and re-arms.
func (f *Floor) arm() {
	runtime.SetFinalizer(&sentinel{f}, func(*sentinel) {
		if f.stopped.Load() {
			return
		}
		f.tune()
		f.arm()
	})
}

func (f *Floor) tune() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped.Load() {
		return
	}
	metrics.Read(f.sample[:])
	var v [3]uint64
	for i, s := range f.sample {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	debug.SetGCPercent(Percent(v[0], v[1]+v[2], f.floor, f.base))
}

// Stop ends the tuning and restores the percent Start found.
func (f *Floor) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped.Swap(true) {
		return
	}
	debug.SetGCPercent(f.base)
}
