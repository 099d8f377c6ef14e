package analytics

import (
	"bytes"
	"strconv"
	"testing"
	"time"
	"unsafe"
)

// Each id add returns keeps its bytes while the caller reuses its buffer
// and later adds fill the block and start new ones; long and empty ids are
// kept as well.
func TestIDArena_IDsKeepTheirBytesAcrossBlocks(t *testing.T) {
	t.Parallel()
	var a idArena
	var ids []rowID
	var want []string
	buf := make([]byte, 0, 64)
	long := bytes.Repeat([]byte("L"), idBlockSize/8+1)
	for i := 0; i < 3*idBlockSize/8; i++ { // ids of 8–12 bytes: several blocks
		buf = appendRowID(buf[:0], "app", "if", strconv.Itoa(i))
		switch i {
		case 100:
			buf = append(buf[:0], long...)
		case 200:
			buf = buf[:0]
		}
		ids = append(ids, a.add(buf))
		want = append(want, string(buf))
		clear(buf) // the caller's buffer is written over
	}
	for i, id := range ids {
		if string(id) != want[i] {
			t.Fatalf("id %d = %q, want %q", i, id, want[i])
		}
	}
	if len(a.block) == 0 || cap(a.block) != idBlockSize {
		t.Fatalf("the arena's block holds %d of %d bytes", len(a.block), cap(a.block))
	}
}

// New rows cost Record no allocation of their own: their ids go into the
// shard's blocks (a few blocks, the growth of the shard's rows and table,
// amortised over the rows).
func TestRecord_NewRowsAllocateBlocksNotIDs(t *testing.T) {
	r := newOfflineRecorder(t, Options{LiveShards: 1, MaxPendingRows: 1 << 20})
	users := make([]string, 20_000)
	for i := range users {
		users[i] = "user-" + strconv.Itoa(i)
	}
	n := 0
	allocs := testing.AllocsPerRun(len(users)-1, func() {
		r.Record("app-1", "iface.2", users[n], true)
		n++
	})
	if allocs > 0.05 {
		t.Fatalf("Record of a new row: %.3f allocations, want well under one (the id in a block)", allocs)
	}
	if got := len(r.live[0].rows.keys); got != len(users) {
		t.Fatalf("%d live rows, want %d", got, len(users))
	}
}

// The keys that outlive a flush, the pending (app, interface, day) rows
// (which a held minute carries over) and the touched HyperLogLogs (kept up
// to a day), own their strings: pointing into a live shard's id block,
// they would keep the whole block alive.
func TestIDArena_KeysKeptPastAFlushDoNotPointIntoBlocks(t *testing.T) {
	t.Parallel()
	r, _, _ := newShardRecorder(t)
	r.Record("app", "iface", "user", true)
	inBlock := func(s string) bool {
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		for i := range r.live {
			if b := r.live[i].ids.block; cap(b) > 0 {
				lo := uintptr(unsafe.Pointer(&b[:1][0]))
				if p >= lo && p < lo+uintptr(cap(b)) {
					return true
				}
			}
		}
		// The interface-level queue's buffer, reused once its pass is done.
		if b := r.ifaceQueue.buf; cap(b) > 0 {
			lo := uintptr(unsafe.Pointer(&b[:1][0]))
			return p >= lo && p < lo+uintptr(cap(b))
		}
		return false
	}
	var id rowID
	for i := range r.live {
		for _, k := range r.live[i].rows.keys {
			id = k.id
		}
	}
	if !inBlock(id.app()) {
		t.Fatal("the live row's id is not in its shard's block: the test cannot tell")
	}
	r.lastIfacePass = time.Time{} // the interface pass is due: both keys are touched
	if err := heldFlush(t, r); err != nil {
		t.Fatal(err)
	}
	// After the write the held minute is the shard's pending rows.
	if len(r.shards[0].pending.daily) != 1 {
		t.Fatalf("%d pending day rows after the held flush, want the held one", len(r.shards[0].pending.daily))
	}
	for k := range r.shards[0].pending.daily {
		if inBlock(k.app) || inBlock(k.iface) {
			t.Errorf("held row %q/%q points into an id block", k.app, k.iface)
		}
	}
	for k := range r.shards[0].pending.users {
		if inBlock(k.app) {
			t.Errorf("user group %q points into an id block", k.app)
		}
	}
	if len(r.touched) != 2 {
		t.Fatalf("%d touched HyperLogLogs, want 2 (app and interface)", len(r.touched))
	}
	for k := range r.touched {
		if inBlock(k.app) || inBlock(k.iface) {
			t.Errorf("touched key %q/%q points into an id block", k.app, k.iface)
		}
	}
}
