package warm

import (
	"hash/maphash"
	"slices"
	"sync"
)

// warmStripes is the number of in-process locks warm records hash onto.
const warmStripes = 4096

// warmLocks serialises, within this process, the read-decide-write of warm
// records that hash to one stripe. Concurrent checks on one warm cell then
// queue on a mutex instead of losing compare-and-sets to each other: with
// 32 callers on one cell, optimistic retries alone could exhaust
// MaxAttempts. Other processes still race through the compare-and-set,
// which stays the only guarantee of atomicity; these locks only make it
// rarely fail. A holder waits on Redis and never on another stripe, and
// stripes are taken in ascending order, so holders cannot deadlock.
type warmLocks struct {
	seed    maphash.Seed
	stripes [warmStripes]sync.Mutex
}

func newWarmLocks() *warmLocks { return &warmLocks{seed: maphash.MakeSeed()} }

// lock takes the stripes of locs, in ascending order, and returns them
// for unlock. buf is where they are listed (a caller's stack array keeps a
// check free of allocations).
func (w *warmLocks) lock(locs []DirLoc, buf []uint16) []uint16 {
	idx := buf[:0]
	for _, l := range locs {
		var h maphash.Hash
		h.SetSeed(w.seed)
		h.WriteString(l.base)
		h.WriteString(l.Field)
		idx = append(idx, uint16(h.Sum64()%warmStripes))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		w.stripes[i].Lock()
	}
	return idx
}

// unlock releases the stripes lock returned.
func (w *warmLocks) unlock(idx []uint16) {
	for _, i := range idx {
		w.stripes[i].Unlock()
	}
}
