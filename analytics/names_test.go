package analytics

import (
	"testing"
	"unsafe"
)

func sameBytes(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

func TestNameTable_OneCopyPerNameNotTheCallersBytes(t *testing.T) {
	t.Parallel()
	var names nameTable
	buf := []byte("app-7")
	first := names.of(string(buf))
	again := names.of(string([]byte("app-7"))) // equal, in other bytes
	if first != "app-7" || !sameBytes(first, again) {
		t.Fatalf("of gave %q and %q, want one copy of app-7", first, again)
	}
	s := unsafe.String(&buf[0], len(buf))
	if got := names.of(s); sameBytes(got, s) {
		t.Fatal("the table kept the caller's bytes")
	}
	var none *nameTable
	if a, b := none.of("x"), none.of("x"); a != "x" || sameBytes(a, b) {
		t.Fatal("a nil table should copy every time")
	}
}

func TestNameTable_StartsAgainPastItsLimit(t *testing.T) {
	t.Parallel()
	names := nameTable{limit: 3}
	old := names.of("a")
	names.of("b")
	names.of("c")
	names.of("d") // past the limit: the table starts again with d
	if len(names.m) != 1 {
		t.Fatalf("the table holds %d names after its limit, want 1", len(names.m))
	}
	if again := names.of("a"); again != "a" || sameBytes(again, old) {
		t.Fatalf("a after the restart: %q, same copy %v; want a new copy", again, sameBytes(again, old))
	}
}

// The pending day rows and the touched HyperLogLogs of many interfaces of
// one app share one copy of its name, and interfaces theirs across apps:
// two objects per pair were what the collector marked on every cycle.
func TestFlush_KeysKeptPastAFlushShareTheirNames(t *testing.T) {
	t.Parallel()
	r, _, _ := newShardRecorder(t)
	for _, app := range []string{"app-1", "app-2"} {
		for _, iface := range []string{"a.get", "b.get", "c.get"} {
			r.Record(app, iface, "user", true)
		}
	}
	if err := heldFlush(t, r); err != nil {
		t.Fatal(err)
	}
	copies := map[string]map[*byte]bool{}
	note := func(s string) {
		if copies[s] == nil {
			copies[s] = map[*byte]bool{}
		}
		copies[s][unsafe.StringData(s)] = true
	}
	for k := range r.shards[0].pending.daily {
		note(k.app)
		note(k.iface)
	}
	for k := range r.touched {
		note(k.app)
		if k.iface != "" {
			note(k.iface)
		}
	}
	if len(copies) != 5 {
		t.Fatalf("names kept: %v, want the 2 apps and 3 interfaces", copies)
	}
	for name, ps := range copies {
		if len(ps) != 1 {
			t.Errorf("%q is kept in %d copies, want 1", name, len(ps))
		}
	}
}
