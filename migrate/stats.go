package migrate

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/tiers/warm"
)

// TierUsage is one tier's share.
type TierUsage struct {
	Identities int64 `json:"identities"`
	Bytes      int64 `json:"bytes"` // RedisBytes + MySQLBytes
	RedisBytes int64 `json:"redis_bytes"`
	// MySQLBytes is InnoDB's own estimate of cold_cells' data and index
	// (information_schema), which it refreshes in the background once a
	// tenth of a table has changed: right after a cycle has moved many
	// cells cold it may still be the table's size before.
	MySQLBytes int64 `json:"mysql_bytes"`
}

// TierStats is the answer of GET /v1/admin/tiers.
type TierStats struct {
	Hot    TierUsage `json:"hot"`
	Warm   TierUsage `json:"warm"`
	Cold   TierUsage `json:"cold"`
	Moving int64     `json:"moving"`
	Method string    `json:"method"`
}

const statsSample = 256

// Stats counts cells per tier and estimates their bytes. Hot: counter
// keys found by SCAN (prefix{tag}<16 bytes>, every algorithm: a hot cell
// has no directory entry) x mean MEMORY USAGE of up to 256 sampled keys,
// plus legacy "H" markers' share of the warm buckets. Warm: every bucket
// hash is read (HGETALL, pipelined) and its fields classified; bucket
// bytes = buckets x mean MEMORY USAGE of sampled buckets, split between
// warm records and markers by their share of field+value bytes. Cold: rows
// (COUNT(*) below 100,000 rows a shard, else information_schema's
// TABLE_ROWS estimate); its Redis bytes are the cold filters' MEMORY
// USAGE, its MySQL bytes DATA_LENGTH + INDEX_LENGTH of cold_cells, summed
// over the shards (TierUsage.MySQLBytes).
// It reads every key under the prefix: an admin tool, not for a hot loop.
//
// Each count it finishes also sets the tier-size gauges (Metrics.counted).
func (m *Mover) Stats(ctx context.Context) (TierStats, error) {
	st, err := m.countTiers(ctx)
	if err == nil {
		now := time.Now()
		m.Metrics.counted(st, now)
		// The fleet's status shows the last count (quotactl status).
		err = m.saveCount(ctx, st, now)
	}
	return st, err
}

func (m *Mover) countTiers(ctx context.Context) (TierStats, error) {
	st := TierStats{Method: "hot: counter keys counted; warm: directory fields counted; MEMORY USAGE sampled (256 keys of each kind); cold: rows, the cold filters' MEMORY USAGE in Redis, and cold_cells' data+index length in MySQL (InnoDB's estimate, refreshed in the background)"}
	hotLen := len(m.Prefix) + 8 + 16
	warmLen := len(m.Prefix) + 8 + 3
	var hotSample, warmSample, filters []string
	var buckets []string
	var hotKeys int64
	var mu sync.Mutex
	err := scanAll(ctx, m.RDB, m.Prefix+"{*", func(k string) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case len(k) == hotLen:
			hotKeys++
			if len(hotSample) < statsSample {
				hotSample = append(hotSample, k)
			}
		case len(k) == warmLen && k[len(m.Prefix)+8] == 'w':
			buckets = append(buckets, k)
			if len(warmSample) < statsSample {
				warmSample = append(warmSample, k)
			}
		case len(k) == warmLen-2 && k[len(k)-1] == 'd':
			filters = append(filters, k)
		case len(k) == hotLen+1 && strings.HasSuffix(k, "~"):
			st.Moving++
		}
	})
	if err != nil {
		return st, fmt.Errorf("tier stats: %w", err)
	}
	hotMean, err := m.meanUsage(ctx, hotSample)
	if err != nil {
		return st, err
	}
	st.Hot.Bytes = int64(hotMean * float64(hotKeys))
	st.Hot.Identities = hotKeys
	var recBytes, markBytes int64
	for i := 0; i < len(buckets); i += 200 {
		part := buckets[i:min(i+200, len(buckets))]
		pipe := m.RDB.Pipeline()
		cmds := make([]*redis.MapStringStringCmd, len(part))
		for j, k := range part {
			cmds[j] = pipe.HGetAll(ctx, k)
		}
		_, _ = pipe.Exec(ctx)
		for _, c := range cmds {
			fields, err := c.Result()
			if err != nil {
				return st, fmt.Errorf("tier stats: %w", err)
			}
			for f, v := range fields {
				switch v {
				case warm.DirHot:
					st.Hot.Identities++
					markBytes += int64(len(f) + len(v))
				case warm.DirMoving:
					st.Moving++
					markBytes += int64(len(f) + len(v))
				default:
					st.Warm.Identities++
					recBytes += int64(len(f) + len(v))
				}
			}
		}
	}
	warmMean, err := m.meanUsage(ctx, warmSample)
	if err != nil {
		return st, err
	}
	total := warmMean * float64(len(buckets))
	if recBytes+markBytes > 0 {
		st.Warm.Bytes = int64(total * float64(recBytes) / float64(recBytes+markBytes))
		st.Hot.Bytes += int64(total) - st.Warm.Bytes
	}
	filterMean, err := m.meanUsage(ctx, filters[:min(len(filters), statsSample)])
	if err != nil {
		return st, err
	}
	st.Cold.RedisBytes = int64(filterMean * float64(len(filters)))
	if err := m.countCold(ctx, &st); err != nil {
		return st, err
	}
	st.Hot.RedisBytes, st.Warm.RedisBytes = st.Hot.Bytes, st.Warm.Bytes
	st.Cold.Bytes = st.Cold.RedisBytes + st.Cold.MySQLBytes
	return st, nil
}

// countCold adds the cold shards' rows and bytes of cold_cells to st.
func (m *Mover) countCold(ctx context.Context, st *TierStats) error {
	if m.Cold == nil {
		return nil
	}
	rows, size, err := m.Cold.Size(ctx)
	if err != nil {
		return fmt.Errorf("tier stats: %w", err)
	}
	st.Cold.Identities += rows
	st.Cold.MySQLBytes += size
	return nil
}

func (m *Mover) meanUsage(ctx context.Context, keys []string) (float64, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	pipe := m.RDB.Pipeline()
	cmds := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.MemoryUsage(ctx, k, 0)
	}
	_, _ = pipe.Exec(ctx)
	var sum, n int64
	for _, c := range cmds {
		v, err := c.Result()
		if err == redis.Nil {
			continue // expired meanwhile
		}
		if err != nil {
			return 0, fmt.Errorf("tier stats: %w", err)
		}
		sum += v
		n++
	}
	if n == 0 {
		return 0, nil
	}
	return float64(sum) / float64(n), nil
}

// scanAll calls fn with every key matching match: on a Redis Cluster on
// every master (a SCAN through the cluster client reaches one node only, so
// the counts would hold only that node's share), concurrently.
func scanAll(ctx context.Context, rdb redis.UniversalClient, match string, fn func(string)) error {
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, match, 5000).Iterator()
		for iter.Next(ctx) {
			fn(iter.Val())
		}
		return iter.Err()
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	}
	return scan(ctx, rdb)
}
