package tiers

import (
	"crypto/md5"
	"encoding/binary"
)

// Cold-tier sharding. A cell's shard is a function of its ShardKey, a stable
// hash of (app_id, user_id) - app_id alone for rules without user_id - so
// that all the cold cells of one user of one app sit in one shard. The key is
// mapped to one of N shards by jump consistent hashing, so that growing N to
// N+1 moves only 1/(N+1) of the keys (moving those rows is a migration job;
// the mapping itself never changes for a given N).

const shardKeyVersion = "quota/shard/1"

// ShardKeyOf returns the shard key of (appID, userID); pass userID "" for a
// rule without user_id. It is never 0 (0 in Cell.ShardKey means "unset").
func ShardKeyOf(appID, userID string) uint64 {
	var buf [128]byte
	b := append(buf[:0], shardKeyVersion...)
	b = binary.AppendUvarint(b, uint64(len(appID)))
	b = append(b, appID...)
	b = binary.AppendUvarint(b, uint64(len(userID)))
	b = append(b, userID...)
	sum := md5.Sum(b)
	return nonZero(binary.BigEndian.Uint64(sum[:8]))
}

// ShardKeyOfIdentity is the shard key of a cell whose rule has neither
// app_id nor user_id: its identity spreads such cells evenly.
func ShardKeyOfIdentity(id Identity) uint64 {
	return nonZero(binary.BigEndian.Uint64(id[8:16]))
}

func nonZero(k uint64) uint64 {
	if k == 0 {
		return 1
	}
	return k
}

// CellShardKey is the shard key a store uses for a cell of id with
// Cell.ShardKey shardKey.
func CellShardKey(shardKey uint64, id Identity) uint64 {
	if shardKey != 0 {
		return shardKey
	}
	return ShardKeyOfIdentity(id)
}

// JumpShard maps key to a shard in [0, n) with the jump consistent hash of
// Lamping and Veach (arXiv:1406.2294). n must be >= 1.
func JumpShard(key uint64, n int) int {
	var b, j int64 = -1, 0
	for j < int64(n) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}
