package loadgen

import (
	"encoding/json"
	"net/netip"
	"strconv"
	"testing"
)

func TestAppendCheckIsValidJSON(t *testing.T) {
	t.Parallel()
	cases := []struct {
		key    Key
		wantIP string
	}{
		{Key{}, "1.0.0.0"},
		{Key{App: 7, User: 42, IP: 258, Iface: 3}, "1.0.1.2"},
		{Key{App: 999, User: 99999, IP: 99999, Iface: 49}, "1.1.134.159"},
		{Key{App: 1 << 40, User: 1<<64 - 1, IP: maxIPs - 1, Iface: 1 << 20}, "255.255.255.254"},
	}
	for _, tc := range cases {
		b := AppendCheck([]byte("junk"), tc.key)[len("junk"):]
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		want := map[string]string{
			"app_id":       "app-" + strconv.FormatUint(tc.key.App, 10),
			"user_id":      "user-" + strconv.FormatUint(tc.key.User, 10),
			"interface_id": "iface-" + strconv.FormatUint(tc.key.Iface, 10),
			"ip":           tc.wantIP,
		}
		if len(got) != len(want) {
			t.Errorf("%s: %d fields, want %d", b, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s = %#v, want %q", b, k, got[k], v)
			}
		}
		if _, err := netip.ParseAddr(tc.wantIP); err != nil {
			t.Errorf("%s is not an IP: %v", tc.wantIP, err)
		}
	}
}

func TestAppendBatch(t *testing.T) {
	t.Parallel()
	ks := smallKeyspace(DistZipf)
	for _, n := range []int{1, 2, 100} {
		b := AppendBatch(nil, NewKeySource(ks, 5, 0), n)
		var got struct {
			Checks []map[string]string `json:"checks"`
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("batch of %d: %v", n, err)
		}
		if len(got.Checks) != n {
			t.Fatalf("batch of %d has %d checks", n, len(got.Checks))
		}
		ref := NewKeySource(ks, 5, 0)
		for i, c := range got.Checks {
			var want map[string]string
			if err := json.Unmarshal(AppendCheck(nil, ref.Next()), &want); err != nil {
				t.Fatal(err)
			}
			for k, v := range want {
				if c[k] != v {
					t.Errorf("batch of %d, check %d: %s = %q, want %q", n, i, k, c[k], v)
				}
			}
		}
	}
}

func TestAppendCheckDoesNotAllocate(t *testing.T) {
	src := NewKeySource(smallKeyspace(DistZipf), 1, 0)
	buf := make([]byte, 0, 256)
	allocs := testing.AllocsPerRun(1000, func() {
		buf = AppendCheck(buf[:0], src.Next())
	})
	if allocs != 0 {
		t.Errorf("AppendCheck allocates %.1f times per call", allocs)
	}
}

func BenchmarkAppendCheck(b *testing.B) {
	src := NewKeySource(smallKeyspace(DistUniform), 1, 0)
	buf := make([]byte, 0, 256)
	for b.Loop() {
		buf = AppendCheck(buf[:0], src.Next())
	}
}
