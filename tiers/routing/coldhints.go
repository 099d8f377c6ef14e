package routing

import (
	"encoding/binary"
	"math/bits"
	"sync/atomic"

	"github.com/quota-platform/quota/tiers"
)

// ColdHints remembers, lossily, cells recently found in the cold tier (by
// a check's row lookup, a placement in cold, or this process's mover), so
// that the router can send a check on such a cell straight to its cold
// transaction instead of first asking the shard whether the row exists
// (ColdStore.Exists: a round trip and a SELECT per batch and shard, about
// a third of a cold check's cost in quotad and in MySQL).
//
// A hint is only ever a guess at where to look, never the truth: the cold
// part is sent with Op.MustExist, and its locking read finds the row or
// fails the part with ErrMoved; the router then forgets the part's hints
// and sends the op again, which looks the row up as before. So a stale or
// colliding hint costs one wasted cold transaction, never a count. A cell
// whose hot key or directory field exists is routed by those and never
// consults a hint, so a cell moved out of cold needs no invalidation here.
//
// Layout: a direct-mapped table of 2^k atomic uint64 slots (8 bytes per
// slot, nothing else). A cell id (an MD5, uniform) picks its slot with its
// first 8 bytes and is stored as its last 8 bytes with the low bit set, so
// an empty slot (0) never matches. A new hint overwrites whatever held its
// slot: no locks, no allocation, no eviction list. Two ids share a slot
// and tag with probability ~2^-63 per lookup; that would cost a retry.
type ColdHints struct {
	slots []atomic.Uint64
	mask  uint64
}

// NewColdHints returns a table of at least n slots (rounded up to a power
// of two), or nil when n <= 0 (no hints: every cold check looks the row up).
func NewColdHints(n int) *ColdHints {
	if n <= 0 {
		return nil
	}
	size := uint64(1) << bits.Len64(uint64(n-1))
	return &ColdHints{slots: make([]atomic.Uint64, size), mask: size - 1}
}

func (h *ColdHints) slot(id tiers.CellID) (*atomic.Uint64, uint64) {
	i := binary.LittleEndian.Uint64(id[:8]) & h.mask
	return &h.slots[i], binary.LittleEndian.Uint64(id[8:]) | 1
}

// Has reports whether id was hinted cold and not forgotten or overwritten
// since. A nil table has no hints.
func (h *ColdHints) Has(id tiers.CellID) bool {
	if h == nil {
		return false
	}
	s, tag := h.slot(id)
	return s.Load() == tag
}

// Add hints that id is cold.
func (h *ColdHints) Add(id tiers.CellID) {
	if h == nil {
		return
	}
	s, tag := h.slot(id)
	s.Store(tag)
}

// Forget drops id's hint, if its slot still holds it.
func (h *ColdHints) Forget(id tiers.CellID) {
	if h == nil {
		return
	}
	s, tag := h.slot(id)
	s.CompareAndSwap(tag, 0)
}
