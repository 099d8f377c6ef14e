package analytics

// ShardIndex is the MySQL shard (0…shards-1) that holds an app's analytics
// rows: FNV-1a 64-bit of the app_id's bytes, modulo the number of shards.
// It is stable across processes, versions and machines (no random seed), so
// every quotad instance writes an app to the same shard. Changing the number
// of shards moves apps: existing rows are then not found where ShardIndex
// points until they are moved.
func ShardIndex(appID string, shards int) int {
	if shards <= 1 {
		return 0
	}
	return int(FNV1a64(appID) % uint64(shards))
}

// FNV1a64 is the 64-bit FNV-1a hash of s, as hash/fnv's New64a computes
// it. Written out because hash/fnv takes bytes through a hash.Hash: a copy
// of s and an interface call for each of a flush's rows.
func FNV1a64(s string) uint64 { return fnv1a64Continue(fnvOffset, s) }

const fnvOffset = 14695981039346656037

// fnv1a64Continue is the FNV-1a hash of s appended to the bytes whose hash
// is h (fnvOffset for none).
func fnv1a64Continue[S ~string | ~[]byte](h uint64, s S) uint64 {
	const prime = 1099511628211
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime
	}
	return h
}
