package loadgen

import (
	"strings"
	"testing"
)

func smallKeyspace(dist string) Keyspace {
	return Keyspace{Apps: 1000, Users: 100000, IPs: 100000, Ifaces: 50, Dist: dist, ZipfS: 1.1}
}

func draw(src *KeySource, n int) []Key {
	keys := make([]Key, n)
	for i := range keys {
		keys[i] = src.Next()
	}
	return keys
}

func TestKeySourceDeterministic(t *testing.T) {
	t.Parallel()
	ident := func(ks Keyspace, n uint64) Keyspace { ks.Identities = n; return ks }
	cases := []struct {
		name string
		ks   Keyspace
	}{
		{"uniform", smallKeyspace(DistUniform)},
		{"zipf", smallKeyspace(DistZipf)},
		{"identities uniform", ident(smallKeyspace(DistUniform), 10_000_000)},
		{"identities zipf", ident(smallKeyspace(DistZipf), 10_000_000)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := tc.ks.Validate(); err != nil {
				t.Fatal(err)
			}
			a := draw(NewKeySource(tc.ks, 42, 3), 2000)
			b := draw(NewKeySource(tc.ks, 42, 3), 2000)
			for i := range a {
				if a[i] != b[i] {
					t.Fatalf("draw %d differs with the same seed: %+v vs %+v", i, a[i], b[i])
				}
			}
			for _, other := range []*KeySource{NewKeySource(tc.ks, 43, 3), NewKeySource(tc.ks, 42, 4)} {
				c := draw(other, 2000)
				same := 0
				for i := range a {
					if a[i] == c[i] {
						same++
					}
				}
				if same > len(a)/2 {
					t.Errorf("another seed or stream repeats %d of %d draws", same, len(a))
				}
			}
		})
	}
}

func TestKeySourceRanges(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		ks   Keyspace
	}{
		{"uniform tiny", Keyspace{Apps: 1, Users: 1, IPs: 1, Ifaces: 1, Dist: DistUniform}},
		{"zipf tiny", Keyspace{Apps: 1, Users: 2, IPs: 3, Ifaces: 1, Dist: DistZipf, ZipfS: 1.5}},
		{"uniform", Keyspace{Apps: 7, Users: 11, IPs: 13, Ifaces: 3, Dist: DistUniform}},
		{"zipf", Keyspace{Apps: 7, Users: 11, IPs: 13, Ifaces: 3, Dist: DistZipf, ZipfS: 1.01}},
		{"identities", Keyspace{Apps: 7, Users: 11, IPs: 13, Ifaces: 3, Identities: 231, Dist: DistUniform}},
		{"identities zipf", Keyspace{Apps: 7, Users: 11, IPs: 13, Ifaces: 3, Identities: 100, Dist: DistZipf, ZipfS: 3}},
		{"max ips", Keyspace{Apps: 2, Users: 2, IPs: maxIPs, Ifaces: 2, Dist: DistUniform}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := tc.ks.Validate(); err != nil {
				t.Fatal(err)
			}
			src := NewKeySource(tc.ks, 1, 0)
			for range 5000 {
				k := src.Next()
				if k.App >= tc.ks.Apps || k.User >= tc.ks.Users || k.IP >= tc.ks.IPs || k.Iface >= tc.ks.Ifaces {
					t.Fatalf("key %+v out of range of %+v", k, tc.ks)
				}
			}
		})
	}
}

// topShare is the share of the draws that went to the most drawn value.
func topShare(vals []uint64) float64 {
	counts := map[uint64]int{}
	top := 0
	for _, v := range vals {
		counts[v]++
		top = max(top, counts[v])
	}
	return float64(top) / float64(len(vals))
}

func TestZipfSkew(t *testing.T) {
	t.Parallel()
	const draws = 200_000
	cases := []struct {
		name       string
		ks         Keyspace
		project    func(Key) uint64
		n          uint64
		wantSkewed bool
	}{
		{"uniform apps", smallKeyspace(DistUniform), func(k Key) uint64 { return k.App }, 1000, false},
		{"zipf apps", smallKeyspace(DistZipf), func(k Key) uint64 { return k.App }, 1000, true},
		{"zipf users", smallKeyspace(DistZipf), func(k Key) uint64 { return k.User }, 100000, true},
		{"uniform identities", Keyspace{Apps: 1000, Users: 100000, IPs: 100000, Ifaces: 50, Identities: 1000, Dist: DistUniform},
			func(k Key) uint64 { return k.App<<40 | k.User<<8 | k.Iface }, 1000, false},
		{"zipf identities", Keyspace{Apps: 1000, Users: 100000, IPs: 100000, Ifaces: 50, Identities: 1000, Dist: DistZipf, ZipfS: 1.1},
			func(k Key) uint64 { return k.App<<40 | k.User<<8 | k.Iface }, 1000, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := NewKeySource(tc.ks, 7, 0)
			vals := make([]uint64, draws)
			for i := range vals {
				vals[i] = tc.project(src.Next())
			}
			share := topShare(vals)
			uniform := 1 / float64(tc.n)
			if tc.wantSkewed && share < 50*uniform {
				t.Errorf("top value share %.5f, want far above the uniform %.5f", share, uniform)
			}
			if !tc.wantSkewed && share > 3*uniform {
				t.Errorf("top value share %.5f, want near the uniform %.5f", share, uniform)
			}
		})
	}
}

func TestIdentityIsBijective(t *testing.T) {
	t.Parallel()
	cases := []Keyspace{
		{Apps: 3, Users: 5, IPs: 4, Ifaces: 7},
		{Apps: 1, Users: 1, IPs: 1, Ifaces: 1},
		{Apps: 10, Users: 10, IPs: 9, Ifaces: 10}, // m = 1000, shares factors with the multiplier search
		{Apps: 64, Users: 32, IPs: 100, Ifaces: 2},
	}
	for _, ks := range cases {
		ks.Dist = DistUniform
		m, _ := ks.tupleSpace()
		seen := map[Key]uint64{}
		for id := range m {
			k := ks.Identity(id)
			if k.App >= ks.Apps || k.User >= ks.Users || k.IP >= ks.IPs || k.Iface >= ks.Ifaces {
				t.Fatalf("%+v: identity %d -> %+v out of range", ks, id, k)
			}
			if k != ks.Identity(id) {
				t.Fatalf("%+v: identity %d is not deterministic", ks, id)
			}
			tuple := Key{App: k.App, User: k.User, Iface: k.Iface}
			if prev, dup := seen[tuple]; dup {
				t.Fatalf("%+v: identities %d and %d share the tuple %+v", ks, prev, id, tuple)
			}
			seen[tuple] = id
		}
	}
}

func TestIdentityDrawsStayInTheIdentitySet(t *testing.T) {
	t.Parallel()
	ks := Keyspace{Apps: 1000, Users: 100000, IPs: 100000, Ifaces: 50, Identities: 20, Dist: DistUniform}
	want := map[Key]bool{}
	for id := range ks.Identities {
		want[ks.Identity(id)] = true
	}
	src := NewKeySource(ks, 1, 0)
	got := map[Key]bool{}
	for range 2000 {
		k := src.Next()
		if !want[k] {
			t.Fatalf("drew %+v, not one of the %d identities", k, ks.Identities)
		}
		got[k] = true
	}
	if len(got) != int(ks.Identities) {
		t.Errorf("2000 uniform draws hit %d of %d identities", len(got), ks.Identities)
	}
}

func TestKeyspaceValidate(t *testing.T) {
	t.Parallel()
	good := smallKeyspace(DistUniform)
	cases := []struct {
		name    string
		mod     func(*Keyspace)
		wantErr string
	}{
		{"defaults", func(*Keyspace) {}, ""},
		{"zipf", func(k *Keyspace) { k.Dist = DistZipf }, ""},
		{"ten million identities", func(k *Keyspace) { k.Identities = 10_000_000 }, ""},
		{"zipf s = 1", func(k *Keyspace) { k.Dist, k.ZipfS = DistZipf, 1 }, "-zipf-s"},
		{"zipf s < 1", func(k *Keyspace) { k.Dist, k.ZipfS = DistZipf, 0.5 }, "-zipf-s"},
		{"uniform ignores s", func(k *Keyspace) { k.ZipfS = 0.5 }, ""},
		{"unknown dist", func(k *Keyspace) { k.Dist = "pareto" }, "-dist"},
		{"no apps", func(k *Keyspace) { k.Apps = 0 }, "-apps"},
		{"no users", func(k *Keyspace) { k.Users = 0 }, "-users"},
		{"no ips", func(k *Keyspace) { k.IPs = 0 }, "-ips"},
		{"too many ips", func(k *Keyspace) { k.IPs = 1 << 32 }, "-ips"},
		{"no ifaces", func(k *Keyspace) { k.Ifaces = 0 }, "-ifaces"},
		{"identities beyond tuples", func(k *Keyspace) { k.Apps, k.Users, k.Ifaces, k.Identities = 2, 3, 4, 25 }, "-identities"},
		{"overflowing tuple space", func(k *Keyspace) { k.Apps, k.Users, k.Identities = 1<<40, 1<<40, 5 }, "overflows"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ks := good
			tc.mod(&ks)
			err := ks.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("unexpected error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one mentioning %q", err, tc.wantErr)
			}
		})
	}
}

func BenchmarkKeySourceZipfIdentities(b *testing.B) {
	ks := smallKeyspace(DistZipf)
	ks.Identities = 10_000_000
	src := NewKeySource(ks, 1, 0)
	var sink Key
	for b.Loop() {
		sink = src.Next()
	}
	_ = sink
}
