package analytics

import "unsafe"

// idArena keeps the ids of a live shard's new rows one after another in
// blocks of idBlockSize bytes, each rowID a string over its bytes.
//
// Why: with uniform keys nearly every call is a new row, and a row's id was
// a heap object of its own: a malloc in Record, and for the fold, which
// reads each row's id once per flush, a cache miss per row, the ids of 64
// shards lying interleaved on the heap. In a block a shard's ids lie in the
// order of its rows, which is the fold's order: the fold reads them in
// sequence. A block is one object without pointers, which the collector
// marks without scanning, and it lives while any row id in it does (the
// pending user rows and distinct-user adds keep theirs until written).
//
// Safety: a block's bytes are written once, by add, before the string
// over them exists, and never again; a full block is left to its strings
// and a new one started, never grown in place.
type idArena struct {
	block []byte // the block being filled; len is the bytes used
}

// idBlockSize is an id block's size: ~400 rows of make bench's ids.
const idBlockSize = 16 << 10

// add returns a rowID with the bytes of id (which it does not keep).
func (a *idArena) add(id []byte) rowID {
	if len(id) == 0 {
		return ""
	}
	if len(id) > idBlockSize/8 { // a long id would waste most of a block's tail
		return rowID(id)
	}
	if cap(a.block)-len(a.block) < len(id) {
		a.block = make([]byte, 0, idBlockSize)
	}
	off := len(a.block)
	a.block = append(a.block, id...)
	return rowID(unsafe.String(&a.block[off], len(id)))
}
