package usage

import (
	"encoding/binary"
	"strings"
	"testing"
)

// makeRowID is the RowID of (app, iface, user), as Record makes it.
func makeRowID(app, iface, user string) RowID {
	return RowID(AppendRowID(nil, app, iface, user))
}

func TestRowIDRoundTrip(t *testing.T) { // not parallel: AllocsPerRun
	long := func(n int, c byte) string { return strings.Repeat(string([]byte{c}), n) }
	cases := []struct{ name, app, iface, user string }{
		{"all empty", "", "", ""},
		{"no user", "app-1", "iface.2", ""},
		{"no interface", "app-1", "", "user-3"},
		{"no app", "", "iface.2", "user-3"},
		{"one byte", "a", "b", "c"},
		{"typical", "app-123", "iface.45", "user-67890"},
		{"127 bytes", long(127, 'a'), long(127, 'i'), long(127, 'u')},
		{"128 bytes", long(128, 'a'), long(128, 'i'), long(128, 'u')},
		{"300 bytes", long(300, 'a'), long(300, 'i'), long(300, 'u')},
		{"mixed lengths", long(128, 'a'), "", long(300, 'u')},
		{"mixed lengths 2", "", long(300, 'i'), "x"},
		{"NUL", "\x00", "a\x00b", "\x00\x00"},
		{"0xff", "\xff", "\xff\xfe", "u\xff"},
		{"0x80 and 0x7f", "\x80", "\x7f", "\x80\x7f"},
		{"separators", "a|b", "|", "||u|"},
		{"length-like bytes", "\x01", "\x02\x03", "\x01\x00"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := makeRowID(c.app, c.iface, c.user)
			if got := id.App(); got != c.app {
				t.Errorf("app() = %q, want %q", got, c.app)
			}
			if got := id.Iface(); got != c.iface {
				t.Errorf("iface() = %q, want %q", got, c.iface)
			}
			if got := id.User(); got != c.user {
				t.Errorf("user() = %q, want %q", got, c.user)
			}
			if a, f, u := id.Split(); a != c.app || f != c.iface || u != c.user {
				t.Errorf("split() = %q, %q, %q", a, f, u)
			}
			// The documented encoding, as encoding/binary reads it.
			b := []byte(id)
			n, k := binary.Uvarint(b)
			if k <= 0 || n != uint64(len(c.app)) || string(b[k:k+int(n)]) != c.app {
				t.Fatalf("app field: len %d (%d bytes)", n, k)
			}
			b = b[k+int(n):]
			n, k = binary.Uvarint(b)
			if k <= 0 || n != uint64(len(c.iface)) || string(b[k:k+int(n)]) != c.iface {
				t.Fatalf("iface field: len %d (%d bytes)", n, k)
			}
			if string(b[k+int(n):]) != c.user {
				t.Fatalf("user field %q", b[k+int(n):])
			}
			if again := makeRowID(strings.Clone(c.app), strings.Clone(c.iface), strings.Clone(c.user)); again != id {
				t.Errorf("not canonical: %q, %q", id, again)
			}
			// Record encodes into a stack buffer: with room, no allocation.
			buf := make([]byte, 0, len(id))
			if got := testing.AllocsPerRun(10, func() { _ = AppendRowID(buf[:0], c.app, c.iface, c.user) }); got != 0 {
				t.Errorf("appendRowID into a buffer with room: %v allocations, want 0", got)
			}
		})
	}
}

// Triples that naive concatenation (with or without a separator that can
// occur in the values) would confuse get different ids.
func TestRowIDDistinguishesTriples(t *testing.T) {
	t.Parallel()
	pairs := [][2][3]string{
		{{"ab", "c", "d"}, {"a", "bc", "d"}},
		{{"a", "b", "cd"}, {"a", "bc", "d"}},
		{{"a", "", "bc"}, {"a", "b", "c"}},
		{{"", "a", "b"}, {"a", "", "b"}},
		{{"a|b", "c", "d"}, {"a", "b|c", "d"}},
		{{"a\x00", "b", "c"}, {"a", "\x00b", "c"}},
		{{"\x01a", "", ""}, {"", "a", ""}}, // a length byte inside a value
		{{strings.Repeat("x", 128), "", ""}, {strings.Repeat("x", 127), "x", ""}},
	}
	for _, p := range pairs {
		a, b := p[0], p[1]
		if makeRowID(a[0], a[1], a[2]) == makeRowID(b[0], b[1], b[2]) {
			t.Errorf("%+q and %+q have the same id", a, b)
		}
	}
}
