package analytics

import (
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
