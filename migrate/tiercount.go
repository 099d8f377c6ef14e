package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// TierCount is the last count of the tiers by any instance (a count reads
// every key: it is made on demand, GET /v1/admin/tiers, not on each look),
// kept in Redis for the fleet's status.
type TierCount struct {
	CountedAt  time.Time `json:"counted_at"`
	AgeSeconds float64   `json:"age_seconds"`
	TierStats
}

func (m *Mover) countKey() string { return m.Prefix + "tiers:count" }

// saveCount keeps st, counted at, as the fleet's last count (30 days).
func (m *Mover) saveCount(ctx context.Context, st TierStats, at time.Time) error {
	js, err := json.Marshal(TierCount{CountedAt: at.UTC(), TierStats: st})
	if err != nil {
		return err
	}
	if err := m.RDB.Set(ctx, m.countKey(), js, 30*24*time.Hour).Err(); err != nil {
		return fmt.Errorf("tier count: %w", err)
	}
	return nil
}

// LastCount is the fleet's last count of the tiers, its age as of now
// (nil: none in 30 days).
func (m *Mover) LastCount(ctx context.Context, now time.Time) (*TierCount, error) {
	js, err := m.RDB.Get(ctx, m.countKey()).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("last tier count: %w", err)
	}
	var tc TierCount
	if err := json.Unmarshal(js, &tc); err != nil {
		return nil, fmt.Errorf("last tier count: %w", err)
	}
	tc.AgeSeconds = round3(now.Sub(tc.CountedAt).Seconds())
	return &tc, nil
}

// round3 is f rounded to three decimals.
func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }
