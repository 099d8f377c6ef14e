package usage

// ShardIndex is the MySQL shard (0…shards-1) that holds an app's analytics
// rows: FNV-1a 64-bit of the app_id, modulo the number of shards; stable
// across processes and versions, so every quotad writes an app to the same
// shard. Changing the number of shards moves apps: their existing rows are
// not found until moved.
func ShardIndex(appID string, shards int) int {
	if shards <= 1 {
		return 0
	}
	return int(FNV1a64(appID) % uint64(shards))
}

// FNV1a64 is the 64-bit FNV-1a hash of s, as hash/fnv's New64a computes
// it, without hash/fnv's copy of s and interface call.
func FNV1a64[S ~string | ~[]byte](s S) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
