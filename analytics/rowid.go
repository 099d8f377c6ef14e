package analytics

import (
	"encoding/binary"
)

// rowID is the (app, interface, user) of a row in one string:
// uvarint(len(app)) app uvarint(len(iface)) iface user. The encoding is
// canonical (equal triples, equal strings), so rowIDs serve as map keys and
// compare with ==.
//
// Why one string: with uniform keys nearly every call is a new row, and a
// row used to hold the request's three strings, each its own heap object
// (the HTTP decoder allocates each value), in the live map key, the pending
// per-user row and the distinct-user queue: ~9 pointers to follow and 3
// objects to mark per row: under make bench's uniform load the GC's mark
// work with analytics on was as much as analytics' own
// (BenchmarkPendingRowGC). A rowID is one pointer and one object per row,
// and the request's strings are not retained.
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
// s is a well-formed rowID.
func rowField(s rowID, i int) (string, int) {
	if c := s[i]; c < 0x80 { // lengths under 128: one byte
		j := i + 1 + int(c)
		return string(s[i+1 : j]), j
	}
	var n uint64
	var shift uint
	for {
		c := s[i]
		i++
		n |= uint64(c&0x7f) << shift
		if c < 0x80 {
			break
		}
		shift += 7
	}
	j := i + int(n)
	return string(s[i:j]), j
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
