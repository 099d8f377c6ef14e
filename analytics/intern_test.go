package analytics

import (
	"runtime"
	"testing"
	"unsafe"
)

// The pending day rows and the touched HyperLogLogs of many interfaces of
// one app share one copy of its name, and interfaces theirs across apps:
// two objects per pair were what the collector marked on every cycle.
func TestFlush_KeysKeptPastAFlushShareTheirNames(t *testing.T) {
	t.Parallel()
	r, _, _ := newShardRecorder(t)
	for _, app := range []string{"app-1", "app-2"} {
		for _, iface := range []string{"a.get", "b.get", "c.get"} {
			r.Recorder.Record(app, iface, "user", true)
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
	for k := range r.Flusher.shards[0].pending.daily {
		note(k.app)
		note(k.iface)
	}
	for k := range r.Flusher.uniq.touched {
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

// A name interned for a pending row is the copy a touched HyperLogLog's key
// gets after collections in between: the row's handles keep it canonical
// (unique drops a canonical copy no Handle refers to, whatever strings
// still point at its bytes).
func TestInternedNamesStayCanonicalAcrossCollections(t *testing.T) {
	t.Parallel()
	rs := newRowset()
	app, iface := string([]byte("app-gc")), string([]byte("iface-gc"))
	rs.ifaceDay(dailyKey{app: app, iface: iface, day: 1}, nil)
	var rowApp string
	for k := range rs.daily {
		rowApp = k.app
	}
	runtime.GC()
	runtime.GC()
	u := &uniques{touched: map[hllKey]*touchedHLL{}}
	u.touchedKey(hllKey{app: string([]byte("app-gc")), scope: scopeApp, day: 1})
	for k := range u.touched {
		if unsafe.StringData(k.app) != unsafe.StringData(rowApp) {
			t.Fatal("the HyperLogLog's key holds a second copy of the app's name")
		}
	}
	runtime.KeepAlive(rs) // pending, as a flusher's shard keeps it
}
