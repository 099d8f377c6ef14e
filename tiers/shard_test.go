package tiers

import (
	"testing"
)

func TestShard_KeysAndMappingAreStable(t *testing.T) {
	t.Parallel()
	// Golden values: a change here moves every cold row to another shard.
	if k := ShardKeyOf("a1", "u42"); k != 0x7f6713abc76c7417 {
		t.Errorf("ShardKeyOf(a1, u42) = %#x", k)
	}
	if k := ShardKeyOf("a1", ""); k == ShardKeyOf("a", "1") {
		t.Error("length prefixes do not separate app and user")
	}
	// The published jump hash vectors (as in github.com/dgryski/go-jump), then ours.
	for _, v := range []struct {
		key      uint64
		n, shard int
	}{{1, 1, 0}, {42, 57, 43}, {0xDEAD10CC, 1, 0}, {0xDEAD10CC, 666, 361}, {256, 1024, 520},
		{0x7f6713abc76c7417, 2, 1}, {0x7f6713abc76c7417, 3, 1}, {0x7f6713abc76c7417, 64, 14}} {
		if got := JumpShard(v.key, v.n); got != v.shard {
			t.Errorf("JumpShard(%#x, %d) = %d, want %d", v.key, v.n, got, v.shard)
		}
	}
	// Growing N to N+1 only moves keys onto the new shard, about 1/(N+1) of them.
	moved, counts := 0, make([]int, 4)
	for i := range 40000 {
		k := ShardKeyOf("app", string(rune(i)))
		a, b := JumpShard(k, 3), JumpShard(k, 4)
		counts[a]++
		if a != b {
			moved++
			if b != 3 {
				t.Fatalf("key moved from %d to %d, not to the new shard", a, b)
			}
		}
	}
	if moved < 9000 || moved > 11000 {
		t.Errorf("%d of 40000 moved growing 3 -> 4 shards, want ~10000", moved)
	}
	for i, c := range counts[:3] {
		if c < 12500 || c > 14200 {
			t.Errorf("shard %d holds %d of 40000 keys over 3 shards", i, c)
		}
	}
}
