package userdays

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/golang/snappy"
	"github.com/quota-platform/quota/analytics/usage"
)

// An entry decodes to what was encoded, whatever the bytes of its strings
// and however large its counts.
func TestUserEntryRoundTrip(t *testing.T) {
	t.Parallel()
	type entry struct {
		user, iface string
		c           usage.Counts
	}
	in := []entry{
		{"", "", usage.Counts{}},
		{"u", "if", usage.Counts{Calls: 3, Allowed: 2, Denied: 1}},
		{"\x00\xff\x80", "a\x00b", usage.Counts{Calls: 1 << 40, Allowed: 1<<40 - 1, Denied: 1}},
		{strings.Repeat("x", 300), strings.Repeat("y", 128), usage.Counts{Calls: 127, Allowed: 128, Denied: 0}},
	}
	var raw []byte
	for _, e := range in {
		raw = appendUserEntry(raw, e.user, e.iface, e.c)
	}
	var out []entry
	if err := EachEntry(snappy.Encode(nil, raw), func(u, f string, c usage.Counts) { out = append(out, entry{u, f, c}) }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(out) != fmt.Sprint(in) {
		t.Fatalf("decoded %+v, want %+v", out, in)
	}
}

// corruptChunks are damaged chunk bodies, by the damage.
func corruptChunks() map[string][]byte {
	good := appendUserEntry(nil, "user", "iface", usage.Counts{Calls: 300, Allowed: 300})
	return map[string][]byte{
		"not snappy":       []byte("\xff\xff\xff\xff"),
		"truncated entry":  snappy.Encode(nil, good[:len(good)-2]),
		"length past end":  snappy.Encode(nil, []byte{0x7f, 'a'}),
		"varint too long":  snappy.Encode(nil, append(appendUserEntry(nil, "u", "i", usage.Counts{})[:4], 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)),
		"count over 2^62":  snappy.Encode(nil, append(append([]byte{1, 'u', 1, 'i'}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f), 0, 0)),
		"garbage after ok": snappy.Encode(nil, append(append([]byte{}, good...), 0x05)),
	}
}

// A damaged chunk is an error, never a panic or a wrong figure.
func TestUserEntry_CorruptChunkIsAnError(t *testing.T) {
	t.Parallel()
	cases := corruptChunks()
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := EachEntry(body, func(string, string, usage.Counts) {})
			if !errors.Is(err, errBadChunk) {
				t.Fatalf("got %v, want errBadChunk", err)
			}
		})
	}
}

// A flush's user rows become chunks per (day, app) and part: each entry in
// exactly one chunk, in the chunk of its user's part, a busy app split
// into more parts, and a part longer than the bound in several chunks.
func TestUserChunks_EachRowInOneChunkOfItsPart(t *testing.T) {
	t.Parallel()
	const maxRaw = 16 << 10
	long := strings.Repeat("z", 200) // makes the busy app's parts exceed maxRaw
	cases := []struct {
		app      string
		users    int
		wantBits uint
	}{
		{"quiet", 3, 0},
		{"edge", partCap, 0},
		{"four", partCap + 1, 2},
		{"sixteen", 4*partCap + 1, 4},
		{"sixty-four", 16*partCap + 1, 6},
		{"busy", 40_000, 8},
	}
	gs := groups{}
	want := map[string]usage.Counts{}
	for _, c := range cases {
		for i := range c.users {
			user := fmt.Sprintf("u%d", i)
			if c.app == "busy" {
				user += long
			}
			cnt := usage.Counts{Calls: int64(i%5 + 1), Allowed: int64(i%5 + 1)}
			gs.add(NewRow(Key{ID: makeRowID(c.app, "if", user), Day: 20000}, cnt))
			want[c.app+"/"+user] = cnt
		}
	}
	chunks := Chunks(gs.inOrder(), sortGroup, maxRaw)
	got := map[string]usage.Counts{}
	bits := map[string]uint{}
	seqs := 0
	for _, ch := range chunks {
		b := uint(ch.part >> 8)
		bits[ch.app] = b
		if ch.seq > 0 {
			seqs++
		}
		raw, err := snappy.Decode(nil, ch.body)
		if err != nil || len(raw) > maxRaw+512 {
			t.Fatalf("chunk %s/%x: %d bytes raw (%v)", ch.app, ch.part, len(raw), err)
		}
		n := 0
		err = EachEntry(ch.body, func(u, f string, c usage.Counts) {
			n++
			if partOf(u, b) != ch.part {
				t.Errorf("user %q in part %x, its part is %x", u, ch.part, partOf(u, b))
			}
			k := ch.app + "/" + u
			if _, dup := got[k]; dup {
				t.Errorf("%s in two chunks", k)
			}
			got[k] = c
		})
		if err != nil || n != ch.entries {
			t.Fatalf("chunk %s/%x: %d entries decoded, %d recorded (%v)", ch.app, ch.part, n, ch.entries, err)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d entries in chunks, want %d", len(got), len(want))
	}
	for k, c := range want {
		if got[k] != c {
			t.Fatalf("%s: %+v, want %+v", k, got[k], c)
		}
	}
	for _, c := range cases {
		if bits[c.app] != c.wantBits {
			t.Errorf("%s (%d users): split with %d bits, want %d", c.app, c.users, bits[c.app], c.wantBits)
		}
	}
	if seqs == 0 {
		t.Error("no part of the busy app took more than one chunk")
	}
}
