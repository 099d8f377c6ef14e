package userdays

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/golang/snappy"

	"github.com/quota-platform/quota/analytics/usage"
)

// Per-user figures are the many rows of analytics (with make bench's keys
// nearly every call is a new one), and an InnoDB upsert costs MariaDB ~7 µs
// of CPU a row. So a flush writes them as a few compressed chunks per (day,
// app) into usage_user_chunks, merged as the day goes on (fold.go) and
// sealed once it is over.
//
// A chunk holds one part of the app's users: all of them when the batch
// has few, else one of 4, 16, 64 or 256 parts by a hash of the user, so a
// query for one user reads its part of each batch.
//
// Chunk body: snappy(entry...), one entry per (user, interface):
//
//	uvarint len(user) user uvarint len(iface) iface uvarint calls uvarint allowed uvarint denied
//
// in any order (a flush writes them by user, a merge by the user's hash).

// chunkMaxRaw bounds a chunk's entries before compression, so that a
// chunk stays far below MySQL's max_allowed_packet (16 MiB by default).
const chunkMaxRaw = 1 << 20

// partCap is the entries per chunk above which a (day, app)'s users of one
// flush are split into more parts.
const partCap = 512

// maxPartBits is the most hash bits a split uses: the part column keeps
// the index in its low 8 bits.
const maxPartBits = 8

// partBitsFor is the number of hash bits that split n entries of a (day,
// app) into parts of at most ~partCap entries: 0, 2, 4, 6 or 8.
func partBitsFor(n int) uint {
	bits := uint(0)
	for bits < maxPartBits && n > partCap<<bits {
		bits += 2
	}
	return bits
}

// partOf is the part column of user's chunk when split with bits hash
// bits: bits<<8 | the user's part index.
func partOf(user string, bits uint) uint16 { return partOfHash(usage.FNV1a64(user), bits) }

func partOfHash(h uint64, bits uint) uint16 { return uint16(bits<<8) | uint16(h&(1<<bits-1)) }

// partsOf are the part values a chunk holding user may have: one for each
// split a flush, a merge or a seal may have used.
func partsOf(user string) [maxPartBits/2 + 1]uint16 {
	h := usage.FNV1a64(user)
	var out [maxPartBits/2 + 1]uint16
	for i := range out {
		out[i] = partOfHash(h, uint(2*i))
	}
	return out
}

func appendUserEntry[S ~string | ~[]byte](b []byte, user, iface S, c usage.Counts) []byte {
	b = binary.AppendUvarint(b, uint64(len(user)))
	b = append(b, user...)
	b = binary.AppendUvarint(b, uint64(len(iface)))
	b = append(b, iface...)
	b = binary.AppendUvarint(b, uint64(c.Calls))
	b = binary.AppendUvarint(b, uint64(c.Allowed))
	return binary.AppendUvarint(b, uint64(c.Denied))
}

var errBadChunk = errors.New("corrupt user chunk")

// EachEntry decodes a chunk body and calls fn for each entry; user and
// iface are substrings of one string per chunk (fn may keep them).
func EachEntry(body []byte, fn func(user, iface string, c usage.Counts)) error {
	raw, err := snappy.Decode(nil, body)
	if err != nil {
		return fmt.Errorf("%w: %v", errBadChunk, err)
	}
	s := string(raw) // one string per chunk: the entries' substrings share it
	for i := 0; i < len(raw); {
		e, next, ok := userEntryAt(raw, i)
		if !ok {
			return errBadChunk
		}
		fn(s[e.user.off:e.user.off+e.user.n], s[e.iface.off:e.iface.off+e.iface.n], e.Counts)
		i = next
	}
	return nil
}

// userEntryAt decodes the entry at raw[i:] (at most 4 GiB) and returns it
// and the index after it; ok is false if it is malformed.
func userEntryAt(raw []byte, i int) (e mergeEntry, next int, ok bool) {
	if e.user, i = rawField(raw, i); i < 0 {
		return e, 0, false
	}
	if e.iface, i = rawField(raw, i); i < 0 {
		return e, 0, false
	}
	var v [3]uint64
	for k := range v {
		x, n := binary.Uvarint(raw[i:])
		if n <= 0 || x > 1<<62 {
			return e, 0, false
		}
		v[k] = x
		i += n
	}
	e.Counts = usage.Counts{Calls: int64(v[0]), Allowed: int64(v[1]), Denied: int64(v[2])}
	return e, i, true
}

// rawField reads a uvarint length at raw[i:] and that many bytes after it
// and returns their span and the index after them; -1: malformed.
func rawField(raw []byte, i int) (rawSpan, int) {
	l, n := binary.Uvarint(raw[i:])
	if n <= 0 || l > uint64(len(raw)-i-n) {
		return rawSpan{}, -1
	}
	start := i + n
	return rawSpan{off: uint32(start), n: uint32(l)}, start + int(l)
}

// userChunk is one usage_user_chunks row to write.
type userChunk struct {
	day     usage.Day
	app     string
	part    uint16
	seq     uint32 // in its batch: a part longer than chunkMaxRaw takes several
	level   uint8  // 0: a flush's; L >= 1: a merge of the day's level-(L−1) chunks, or at maxChunkLevel of its own (fold.go)
	entries int
	body    []byte // compressed
}

// chunkBuffers are appendAppChunks' per-part buffers, reused from one (day,
// app) to the next. Kept: fresh ones took 7 % more bytes (BenchmarkRecordAndPeriodicFlush).
type chunkBuffers struct {
	raws   [][]byte
	counts []int
	seqs   []uint32
}

// reset readies the first parts buffers, empty, and returns them.
func (b *chunkBuffers) reset(parts int) (raws [][]byte, counts []int, seqs []uint32) {
	for len(b.raws) < parts {
		b.raws, b.counts, b.seqs = append(b.raws, nil), append(b.counts, 0), append(b.seqs, 0)
	}
	for p := range parts {
		b.raws[p], b.counts[p], b.seqs[p] = b.raws[p][:0], 0, 0
	}
	return b.raws[:parts], b.counts[:parts], b.seqs[:parts]
}

// appendAppChunks appends the chunks of one (day, app)'s rows, built in buf.
func appendAppChunks(out []userChunk, rows []Row, maxRaw int, buf *chunkBuffers) []userChunk {
	bits := partBitsFor(len(rows))
	raws, counts, seqs := buf.reset(1 << bits)
	day, app := rows[0].Day, rows[0].ID.App()
	emit := func(p int) {
		out = append(out, userChunk{day: day, app: app, part: uint16(bits<<8) | uint16(p), seq: seqs[p],
			entries: counts[p], body: snappy.Encode(nil, raws[p])})
		seqs[p]++
		raws[p], counts[p] = raws[p][:0], 0
	}
	for i := range rows {
		_, iface, user := rows[i].ID.Split()
		p := int(partOf(user, bits) & 0xff)
		raws[p] = appendUserEntry(raws[p], user, iface, rows[i].Counts)
		counts[p]++
		if len(raws[p]) >= maxRaw {
			emit(p)
		}
	}
	for p := range raws {
		if counts[p] > 0 {
			emit(p)
		}
	}
	return out
}
