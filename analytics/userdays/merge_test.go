package userdays

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/golang/snappy"
	"github.com/quota-platform/quota/analytics/usage"
)

// mergeInput is chunk bodies of entries drawn from users × ifaces, each
// (user, interface) in several chunks, and what they sum to.
func mergeInput(seed uint64, chunks, perChunk, users, ifaces int) (bodies [][]byte, want map[[2]string]usage.Counts) {
	rng := rand.New(rand.NewPCG(seed, 1))
	want = map[[2]string]usage.Counts{}
	for range chunks {
		var raw []byte
		for range perChunk {
			user, iface := fmt.Sprintf("user-%d", rng.IntN(users)), fmt.Sprintf("iface.%d", rng.IntN(ifaces))
			c := usage.Counts{Calls: int64(rng.IntN(5) + 1)}
			c.Denied = int64(rng.IntN(int(c.Calls) + 1))
			c.Allowed = c.Calls - c.Denied
			raw = appendUserEntry(raw, user, iface, c)
			w := want[[2]string{user, iface}]
			w.Add(c)
			want[[2]string{user, iface}] = w
		}
		bodies = append(bodies, snappy.Encode(nil, raw))
	}
	return bodies, want
}

// A merge sums every (user, interface) across its chunks into one entry,
// in the chunk of its user's part, split as a flush of that many entries
// would be, a part over the bound in several chunks numbered from 0; and
// the working set, reused, leaves nothing of one merge in the next.
func TestChunkMerge_SumsEachUserInterfaceOnceInItsPart(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name                            string
		chunks, perChunk, users, ifaces int
		maxRaw                          int
		wantBits                        uint
		wantSplitPart                   bool
	}{
		{"one chunk, few users", 1, 10, 4, 2, chunkMaxRaw, 0, false},
		{"many chunks, same few users", 32, 50, 20, 3, chunkMaxRaw, 0, false},
		{"level 0 of make bench", 32, 400, 100_000, 50, chunkMaxRaw, 6, false},
		{"a busy app's day, 256 parts", 8, 6000, 100_000, 2, chunkMaxRaw, 8, false},
		{"four parts", 8, 200, 600, 2, chunkMaxRaw, 2, false},
		{"parts over the bound", 16, 500, 5_000, 4, 4 << 10, 4, true},
		{"every entry over the bound", 4, 400, 2_000, 2, 1, 2, true},
	}
	var m chunkMerge // one for all: as a Rollup's merges share it
	for i, c := range cases {
		bodies, want := mergeInput(uint64(i), c.chunks, c.perChunk, c.users, c.ifaces)
		m.reset()
		for _, b := range bodies {
			if err := m.add(b); err != nil {
				t.Fatalf("%s: add: %v", c.name, err)
			}
		}
		chunks := m.chunks(20000, "app", 3, c.maxRaw)
		got := map[[2]string]usage.Counts{}
		nextSeq := map[uint16]uint32{}
		split := false
		for _, ch := range chunks {
			if ch.day != 20000 || ch.app != "app" || ch.level != 3 {
				t.Fatalf("%s: chunk %+v: wrong day, app or level", c.name, ch)
			}
			if b := uint(ch.part >> 8); b != c.wantBits {
				t.Errorf("%s: part %x split with %d bits, want %d (%d entries)", c.name, ch.part, b, c.wantBits, len(want))
			}
			if ch.seq != nextSeq[ch.part] {
				t.Errorf("%s: part %x: seq %d, want %d", c.name, ch.part, ch.seq, nextSeq[ch.part])
			}
			nextSeq[ch.part]++
			split = split || ch.seq > 0
			raw, err := snappy.Decode(nil, ch.body)
			if err != nil || len(raw) > c.maxRaw+64 {
				t.Fatalf("%s: chunk %x/%d: %d bytes raw (%v)", c.name, ch.part, ch.seq, len(raw), err)
			}
			n := 0
			err = EachEntry(ch.body, func(u, f string, cnt usage.Counts) {
				n++
				if p := partOf(u, uint(ch.part>>8)); p != ch.part {
					t.Errorf("%s: %s in part %x, its part is %x", c.name, u, ch.part, p)
				}
				k := [2]string{u, f}
				if _, dup := got[k]; dup {
					t.Errorf("%s: %v in two entries", c.name, k)
				}
				got[k] = cnt
			})
			if err != nil || n != ch.entries || n == 0 {
				t.Fatalf("%s: chunk %x/%d: %d entries decoded, %d recorded (%v)", c.name, ch.part, ch.seq, n, ch.entries, err)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d entries merged, want %d", c.name, len(got), len(want))
		}
		for k, w := range want {
			if got[k] != w {
				t.Fatalf("%s: %v: %+v, want %+v", c.name, k, got[k], w)
			}
		}
		if split != c.wantSplitPart {
			t.Errorf("%s: a part in several chunks: %v, want %v", c.name, split, c.wantSplitPart)
		}
	}
}

// Entries whose users share a hash are told apart by name: the sum never
// adds one user's figures to another's. (FNV-1a collisions are rare, so
// the keys are given one hash here.)
func TestChunkMerge_UsersOfOneHashSummedApart(t *testing.T) {
	t.Parallel()
	bodies, want := mergeInput(7, 6, 300, 40, 3)
	var m chunkMerge
	for _, b := range bodies {
		if err := m.add(b); err != nil {
			t.Fatal(err)
		}
	}
	for i := range m.keys {
		m.keys[i].hash = 42
	}
	got := map[[2]string]usage.Counts{}
	for _, k := range m.sum() {
		e := &m.entries[k.idx]
		key := [2]string{string(m.bytes(e.user)), string(m.bytes(e.iface))}
		if _, dup := got[key]; dup {
			t.Fatalf("%v twice after the sum", key)
		}
		got[key] = e.Counts
	}
	if len(got) != len(want) {
		t.Fatalf("%d entries summed, want %d", len(got), len(want))
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("%v: %+v, want %+v", k, got[k], w)
		}
	}
}

// A damaged chunk fails the merge (errBadChunk), whatever the damage.
func TestChunkMerge_CorruptChunkIsAnError(t *testing.T) {
	t.Parallel()
	good := appendUserEntry(nil, "user", "iface", usage.Counts{Calls: 300, Allowed: 300})
	cases := corruptChunks()
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var m chunkMerge
			if err := m.add(snappy.Encode(nil, good)); err != nil {
				t.Fatal(err)
			}
			if err := m.add(body); !errors.Is(err, errBadChunk) {
				t.Fatalf("got %v, want errBadChunk", err)
			}
		})
	}
}
