package analytics

import (
	"fmt"
	"testing"

	"github.com/quota-platform/quota/analytics/usage"
)

// The HyperLogLogs' Redis keys keep the format that earlier versions wrote
// with fmt (keys of today already in Redis are added to again).
func TestRedisKeyFormat(t *testing.T) {
	t.Parallel()
	viaFmt := func(prefix string, k hllKey) string {
		s := prefix + fmt.Sprintf("hll:{%016x}:%d:", usage.FNV1a64(k.app), int64(k.day))
		if k.scope == scopeApp {
			return s + "a"
		}
		return s + fmt.Sprintf("i:%016x%016x", usage.FNV1a64(k.iface), usage.FNV1a64("\x00"+k.iface))
	}
	cases := []struct {
		prefix string
		key    hllKey
	}{
		{"q:", hllKey{app: "app-1", scope: scopeApp, day: 20415}},
		{"q:", hllKey{app: "app-1", iface: "users.get", scope: scopeIface, day: 20415}},
		{"", hllKey{app: "", iface: "", scope: scopeIface, day: 0}},
		{"t:1:", hllKey{app: "\xff\x00{}", iface: "\x00", scope: scopeIface, day: -3}},
		{"q:", hllKey{app: "a", scope: scopeApp, day: 1 << 40}},
	}
	for _, c := range cases {
		if got, want := c.key.redisKey(c.prefix), viaFmt(c.prefix, c.key); got != want {
			t.Errorf("%+v: key %q, want %q", c.key, got, want)
		}
	}
}

// The distinct-user queue is sorted by a group whose low 24 bits hash the
// interface; two interfaces of an app whose hashes agree there sort into
// one run of the group, and each must still get its own users.
func TestPFADD_InterfacesWhoseGroupsCollideKeepTheirOwnUsers(t *testing.T) {
	t.Parallel()
	seen := map[uint64]string{}
	var a, b string
	for i := 0; b == ""; i++ {
		name := fmt.Sprintf("if.%d", i)
		h := usage.FNV1a64(name) & (1<<24 - 1)
		if other, ok := seen[h]; ok {
			a, b = other, name
		}
		seen[h] = name
	}
	if groupOf(usage.FNV1a64("app"), 20415, a) != groupOf(usage.FNV1a64("app"), 20415, b) {
		t.Fatal("the two interfaces' groups differ: the test cannot tell")
	}
	r, _, clk := newShardRecorder(t)
	for i := range 3 {
		r.Recorder.Record("app", a, fmt.Sprintf("a-user-%d", i), true)
	}
	for i := range 5 {
		r.Recorder.Record("app", b, fmt.Sprintf("b-user-%d", i), true)
	}
	if err := r.Flusher.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	day := DayOf(clk.Now())
	for iface, want := range map[string]int64{a: 3, b: 5} {
		k := hllKey{app: "app", iface: iface, scope: scopeIface, day: day}
		if got := r.Flusher.uniq.rdb.PFCount(t.Context(), k.redisKey(r.Flusher.opt.KeyPrefix)).Val(); got != want {
			t.Errorf("interface %q: %d distinct users in Redis, want %d", iface, got, want)
		}
	}
	if got := r.Flusher.uniq.rdb.PFCount(t.Context(), hllKey{app: "app", scope: scopeApp, day: day}.redisKey(r.Flusher.opt.KeyPrefix)).Val(); got != 8 {
		t.Errorf("app: %d distinct users in Redis, want 8", got)
	}
}
