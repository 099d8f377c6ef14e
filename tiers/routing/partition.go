package routing

import (
	"context"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/tiers"
)

// ClusterPartition returns a Breaker partition (WithPartitions) for a Redis
// Cluster: the address of the master holding the hash slot of an op's
// cells, or, for an op whose cells span several tags on several masters,
// those addresses in order, comma-separated. It reads go-redis' cached
// slot map (no round trip); "" when that map is not known yet.
//
// After a failover go-redis' map names the promoted replica once it is
// reloaded (ClusterClient.ReloadState), so the ops of the failed master's
// slots find a closed circuit of the new master's.
func ClusterPartition(cc *redis.ClusterClient) func(ctx context.Context, op *tiers.Op) string {
	return func(ctx context.Context, op *tiers.Op) string {
		if len(op.Cells) == 0 {
			return ""
		}
		first := masterOf(ctx, cc, op.Cells[0].Tag)
		var more []string
		for i := 1; i < len(op.Cells); i++ {
			if op.Cells[i].Tag == op.Cells[0].Tag {
				continue
			}
			if a := masterOf(ctx, cc, op.Cells[i].Tag); a != first && !slices.Contains(more, a) {
				more = append(more, a)
			}
		}
		if len(more) == 0 {
			return first
		}
		more = append(more, first)
		slices.Sort(more)
		return strings.Join(more, ",")
	}
}

// masterOf is the address of the master of tag's slot, "" if unknown.
func masterOf(ctx context.Context, cc *redis.ClusterClient, tag tiers.Tag) string {
	c, err := cc.MasterForKey(ctx, "{"+tag.String()+"}")
	if err != nil {
		return ""
	}
	return c.Options().Addr
}
