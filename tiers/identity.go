package tiers

import (
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
)

// Identity is the MD5 of a counter identity: a rule name and the values of
// the rule's dimensions, in the rule's order, each length-prefixed so that no
// choice of values (with "|", ":", "{" or anything else in them) can make two
// identities encode alike.
type Identity [16]byte

// CounterKey is the MD5 of one counter: an identity's encoding plus the
// window length and, for fixed windows, the window index.
type CounterKey [16]byte

// Tag is the Redis Cluster hash tag of a counter: every key of one tag lands
// in one hash slot, so one script can touch them all. It is a hash, never a
// raw dimension value.
type Tag [3]byte

// String is the tag as it appears between braces in a key.
func (t Tag) String() string { return hex.EncodeToString(t[:]) }

const encodingVersion = "quota/1"

// appendIdentity appends the canonical encoding of (rule, values) to b.
func appendIdentity(b []byte, rule string, values []string) []byte {
	b = append(b, encodingVersion...)
	b = binary.AppendUvarint(b, uint64(len(rule)))
	b = append(b, rule...)
	b = binary.AppendUvarint(b, uint64(len(values)))
	for _, v := range values {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

// IdentityOf returns the identity of rule over values.
func IdentityOf(rule string, values []string) Identity {
	var buf [256]byte
	return md5.Sum(appendIdentity(buf[:0], rule, values))
}

// CounterKeyOf returns the key of the counter of (rule, values) for a window
// of windowSec seconds and the given window index (0 for algorithms whose
// state is not split by window index).
func CounterKeyOf(rule string, values []string, windowSec, index int64) CounterKey {
	var buf [256]byte
	b := appendIdentity(buf[:0], rule, values)
	b = binary.AppendUvarint(b, uint64(windowSec))
	b = binary.AppendVarint(b, index)
	return md5.Sum(b)
}

// TagOf returns the hash tag for a tag value (app_id where the rule has it).
func TagOf(value string) Tag {
	sum := md5.Sum([]byte(value))
	return Tag{sum[0], sum[1], sum[2]}
}

// TagOfIdentity is the tag of an identity whose rule has no app_id: one of
// 4,096 pools picked by the identity's first 12 bits. A tag of its own would
// give every such cell a warm bucket of its own; a pool packs them as an
// app's cells are packed, and the cell's hot key, warm bucket and cold
// filter bits all live under the one tag, so one script reaches them on a
// Redis Cluster.
func TagOfIdentity(id Identity) Tag { return Tag{id[0], id[1] & 0xf0, 0} }

// FixedKeyOf is the CounterKey of a fixed-window cell's counter for one
// window index: MD5("quota/fixed/1" ‖ CellID ‖ index as a varint). Deriving
// it from the cell id (rather than from the identity's encoding) lets the
// hot tier's mover find a cell's key from its Ref alone.
func FixedKeyOf(id CellID, index int64) CounterKey {
	var buf [len(fixedKeyVersion) + len(id) + binary.MaxVarintLen64]byte
	b := append(buf[:0], fixedKeyVersion...)
	b = append(b, id[:]...)
	b = binary.AppendVarint(b, index)
	return md5.Sum(b)
}

const fixedKeyVersion = "quota/fixed/1"
