package userdays

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/golang/snappy"

	"github.com/quota-platform/quota/analytics/usage"
)

// chunkMerge is the working set of one merge or seal of an app's user
// chunks: the entries stay in their decoded bodies and are sorted by the
// user's FNV-1a hash (which the part needs anyway), not turned into rows
// sorted by name: 0.3–0.6 µs of quotad's CPU an entry against 1.3–1.7
// (BenchmarkMergeUserChunks when it was written; not re-measured since). A
// Rollup keeps one for all its merges.
type chunkMerge struct {
	raw     []byte       // the chunks' decoded bodies, one after another
	entries []mergeEntry // each entry of raw, in the order decoded
	keys    []mergeKey   // the entries in the order to write them (see sum)
	out     []byte       // the chunk being cut
}

// mergeKey is an entry's place in the merge's sort.
type mergeKey struct {
	hash uint64 // the user's FNV-1a hash, bits reversed (see sum)
	idx  int32  // the entry
}

// mergeEntry is one decoded entry: its user and interface as spans of raw.
type mergeEntry struct {
	user, iface rawSpan
	usage.Counts
}

// rawSpan is raw[off : off+n].
type rawSpan struct{ off, n uint32 }

func (m *chunkMerge) bytes(s rawSpan) []byte { return m.raw[s.off : s.off+s.n] }

// reset empties m, keeping its buffers.
func (m *chunkMerge) reset() {
	m.raw, m.entries, m.keys, m.out = m.raw[:0], m.entries[:0], m.keys[:0], m.out[:0]
}

// add decodes a chunk body and adds its entries.
func (m *chunkMerge) add(body []byte) error {
	n, err := snappy.DecodedLen(body)
	if err != nil {
		return fmt.Errorf("%w: %v", errBadChunk, err)
	}
	start := len(m.raw)
	// The spans are 32-bit; an entry takes 5 bytes or more, so the entries'
	// indices stay below 2^31 too.
	if uint64(start)+uint64(n) > math.MaxUint32 {
		return fmt.Errorf("merge of user chunks: over 4 GiB of entries")
	}
	m.raw = slices.Grow(m.raw, n)[:start+n]
	if raw, err := snappy.Decode(m.raw[start:], body); err != nil {
		return fmt.Errorf("%w: %v", errBadChunk, err)
	} else if len(raw) != n {
		return fmt.Errorf("%w: %d bytes decoded, %d announced", errBadChunk, len(raw), n)
	}
	for i := start; i < len(m.raw); {
		e, next, ok := userEntryAt(m.raw, i)
		if !ok {
			return errBadChunk
		}
		m.keys = append(m.keys, mergeKey{hash: bits.Reverse64(usage.FNV1a64(m.bytes(e.user))), idx: int32(len(m.entries))})
		m.entries = append(m.entries, e)
		i = next
	}
	return nil
}

// chunks sums the entries added per (user, interface) and cuts them into
// the chunks of one batch of app on day at level, as appendAppChunks
// would part them (partBitsFor the entries summed) but in the order of the
// sort below, not by user name: readers take a chunk's entries in any
// order. The chunks' bodies are new; the rest of m is reused by the next
// merge.
func (m *chunkMerge) chunks(day usage.Day, app string, level uint8, maxRaw int) []userChunk {
	keys := m.sum()
	if len(keys) == 0 {
		return nil
	}
	partBits := partBitsFor(len(keys))
	var out []userChunk
	cur := userChunk{day: day, app: app, level: level, part: partOfHash(bits.Reverse64(keys[0].hash), partBits)}
	emit := func() {
		cur.body = snappy.Encode(nil, m.out)
		out = append(out, cur)
		cur.seq++
		cur.entries, m.out = 0, m.out[:0]
	}
	for _, k := range keys {
		part := partOfHash(bits.Reverse64(k.hash), partBits)
		if part != cur.part {
			if cur.entries > 0 { // else the bound just cut the last part
				emit()
			}
			cur.seq = 0
		}
		cur.part = part
		e := &m.entries[k.idx]
		m.out = appendUserEntry(m.out, m.bytes(e.user), m.bytes(e.iface), e.Counts)
		cur.entries++
		if len(m.out) >= maxRaw {
			emit()
		}
	}
	if cur.entries > 0 {
		emit()
	}
	return out
}

// sum sorts the keys by (reversed hash, user, interface), sums the entries
// of equal (user, interface) into the first of them and returns one key
// per (user, interface). The reversed hash puts a user's part (the hash's
// low bits, partOfHash) in the key's top bits, so each part of every split
// is one run of the keys; names are compared only within a hash.
func (m *chunkMerge) sum() []mergeKey {
	keys := m.keys
	slices.SortFunc(keys, func(a, b mergeKey) int { return cmp.Or(cmp.Compare(a.hash, b.hash), m.compareNames(a, b)) })
	n := 0
	for _, k := range keys {
		if n > 0 && keys[n-1].hash == k.hash && m.compareNames(keys[n-1], k) == 0 {
			m.entries[keys[n-1].idx].Counts.Add(m.entries[k.idx].Counts)
			continue
		}
		keys[n] = k
		n++
	}
	m.keys = keys[:n]
	return m.keys
}

// compareNames orders two keys' entries by user, then interface.
func (m *chunkMerge) compareNames(a, b mergeKey) int {
	ea, eb := &m.entries[a.idx], &m.entries[b.idx]
	if c := bytes.Compare(m.bytes(ea.user), m.bytes(eb.user)); c != 0 {
		return c
	}
	return bytes.Compare(m.bytes(ea.iface), m.bytes(eb.iface))
}
