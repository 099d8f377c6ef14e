package analytics

import (
	"encoding/binary"
)

// rowID is the (app, interface, user) of a row in one string:
// uvarint(len(app)) app uvarint(len(iface)) iface user. The encoding is
// canonical, so rowIDs serve as map keys and compare with ==. One object a
// row, not the request's three strings: with uniform keys nearly every call
// is a new row, and the collector marks every one (BenchmarkPendingRowGC).
type rowID string

// appendRowID appends the encoding of (app, iface, user) to b.
func appendRowID(b []byte, app, iface, user string) []byte {
	b = binary.AppendUvarint(b, uint64(len(app)))
	b = append(b, app...)
	b = binary.AppendUvarint(b, uint64(len(iface)))
	b = append(b, iface...)
	return append(b, user...)
}

// rowField returns the length-prefixed field at s[i:] and the index after it.
func rowField(s rowID, i int) (string, int) {
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

// app is the app of the row (a substring: no allocation).
func (id rowID) app() string {
	a, _ := rowField(id, 0)
	return a
}

// iface is the interface of the row (a substring).
func (id rowID) iface() string {
	_, i := rowField(id, 0)
	f, _ := rowField(id, i)
	return f
}

// user is the user of the row (a substring; "" for none).
func (id rowID) user() string {
	_, i := rowField(id, 0)
	_, j := rowField(id, i)
	return string(id[j:])
}

// split returns app, iface and user at once.
func (id rowID) split() (app, iface, user string) {
	app, i := rowField(id, 0)
	iface, j := rowField(id, i)
	return app, iface, string(id[j:])
}
