package analytics

import (
	"hash/maphash"
	"math/bits"
)

// liveTable indexes a live shard's rows by (id, minute): an open-addressing
// hash table (linear probing, at most half full) of indexes into the rows.
//
// Why not a Go map: with uniform keys nearly every call is a new row, and a
// map takes two probes for it (the lookup that misses, then the insert),
// each hashing the key's string again, though Record has already hashed
// the id to choose the shard. Here one probe finds the row or the free slot
// it goes into, from that hash.
type liveTable struct {
	// slots: 0 is free; else the high 32 bits are a tag (the low bits of
	// the row's hash, while its top bits choose its home slot: most slots
	// of other rows are passed without reading their key) and the low 32
	// the row's index + 1.
	slots []uint64
	shift uint // 64 - log2(len(slots)): a hash's top bits are its home slot
}

// minLiveSlots is a new table's size.
const minLiveSlots = 64

// rowHash is the table hash of the row of id (whose maphash, the shard's
// choice too, is idHash) in minute min.
func rowHash(idHash uint64, min int64) uint64 {
	x := (idHash ^ uint64(min)*0x9E3779B97F4A7C15) * 0xBF58476D1CE4E5B9
	return x ^ x>>29
}

// find returns the index of the row (id, min) among keys, or -1 and the
// free slot where it goes.
func (t *liveTable) find(h uint64, id []byte, min int64, keys []liveKey) (index int32, slot int) {
	if len(t.slots) == 0 {
		t.init(minLiveSlots)
	}
	mask := len(t.slots) - 1
	tag := h << 32
	for i := int(h >> t.shift); ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return -1, i
		}
		if s&0xffffffff00000000 == tag {
			j := int32(uint32(s)) - 1
			if k := &keys[j]; k.min == min && string(k.id) == string(id) {
				return j, i
			}
		}
	}
}

// insert puts the row keys[index] (hash h) in slot, which find returned
// for it, and doubles the table once it is half full (rehashing keys with
// seed, the id hash's).
func (t *liveTable) insert(slot int, h uint64, index int32, keys []liveKey, seed maphash.Seed) {
	t.slots[slot] = h<<32 | uint64(uint32(index+1))
	if 2*len(keys) > len(t.slots) {
		t.rehash(2*len(t.slots), keys, seed)
	}
}

func (t *liveTable) init(n int) {
	t.slots = make([]uint64, n)
	t.shift = uint(64 - bits.TrailingZeros(uint(n)))
}

// rehash moves every row of keys into a table of n slots.
func (t *liveTable) rehash(n int, keys []liveKey, seed maphash.Seed) {
	t.init(n)
	mask := n - 1
	for j, k := range keys {
		h := rowHash(maphash.String(seed, string(k.id)), k.min)
		i := int(h >> t.shift)
		for t.slots[i] != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = h<<32 | uint64(uint32(j+1))
	}
}

// reset empties the table, keeping its size for the next flush's rows.
func (t *liveTable) reset() { clear(t.slots) }
