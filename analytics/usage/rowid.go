package usage

import (
	"encoding/binary"
)

// RowID is the (app, interface, user) of a row in one string:
// uvarint(len(app)) app uvarint(len(iface)) iface user. The encoding is
// canonical, so row ids serve as map keys and compare with ==. One object a
// row, not the request's three strings: with uniform keys nearly every call
// is a new row, and the collector marks every one (BenchmarkPendingRowGC).
type RowID string

// AppendRowID appends the encoding of (app, iface, user) to b.
func AppendRowID(b []byte, app, iface, user string) []byte {
	b = binary.AppendUvarint(b, uint64(len(app)))
	b = append(b, app...)
	b = binary.AppendUvarint(b, uint64(len(iface)))
	b = append(b, iface...)
	return append(b, user...)
}

// RowField returns the length-prefixed field at s[i:] and the index after it
// (s[:that index] names the same fields up to it).
func RowField(s RowID, i int) (string, int) {
	var n, shift uint
	for {
		c := s[i]
		i++
		n |= uint(c&0x7f) << shift
		if c < 0x80 {
			break
		}
		shift += 7
	}
	return string(s[i : i+int(n)]), i + int(n)
}

// App is the app of the row (a substring: no allocation).
func (id RowID) App() string {
	a, _ := RowField(id, 0)
	return a
}

// Iface is the interface of the row (a substring).
func (id RowID) Iface() string {
	_, i := RowField(id, 0)
	f, _ := RowField(id, i)
	return f
}

// User is the user of the row (a substring; "" for none).
func (id RowID) User() string {
	_, i := RowField(id, 0)
	_, j := RowField(id, i)
	return string(id[j:])
}

// Split returns app, iface and user at once.
func (id RowID) Split() (app, iface, user string) {
	app, i := RowField(id, 0)
	iface, j := RowField(id, i)
	return app, iface, string(id[j:])
}
