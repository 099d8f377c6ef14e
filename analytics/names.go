package analytics

import (
	"cmp"
	"strings"
)

// nameTable holds one copy of each app and interface name that a key
// kept past a flush needs (the pending (app, interface, day) rows, the
// touched HyperLogLogs). Such a key cannot use the row id's bytes (a
// substring of an idArena block would keep the block alive), and a copy
// per key was two small objects per (app, interface) pair, tens of
// thousands that the collector marked on every cycle, where the names they
// copy number a thousand or so. It is the flusher's alone.
type nameTable struct {
	m     map[string]string
	limit int // names held before the table starts again (0: maxNames)
}

// maxNames bounds a nameTable: past it the table starts again, and names
// are copied anew (keys that hold the old copies keep them).
const maxNames = 1 << 20

// of returns the table's copy of s, made if none; a nil table copies s
// every time.
func (t *nameTable) of(s string) string {
	if t == nil {
		return strings.Clone(s)
	}
	if v, ok := t.m[s]; ok {
		return v
	}
	if t.m == nil || len(t.m) >= cmp.Or(t.limit, maxNames) {
		t.m = make(map[string]string)
	}
	v := strings.Clone(s)
	t.m[v] = v
	return v
}
