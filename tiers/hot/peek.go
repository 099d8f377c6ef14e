package hot

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/tiers"
)

// PeekFixed reads the counts of denied ops' fixed-window cells in one
// round trip (tiers.FixedPeeker): one MGET on a single Redis (a
// pipeline of GETs on a cluster, whose client sends each to its
// master), in place of a script call. A cell whose key exists is where
// hot_fixed.lua would read it, and an op that is denied counts nothing,
// so its answer is the script's: decodeFixed's with nothing counted. A
// missing key (a new cell; with the directory, one that may live in
// another tier) is left for a check.
func (s *Store) PeekFixed(ctx context.Context, now time.Time, peeks []tiers.FixedPeek) error {
	if len(peeks) == 0 {
		return nil
	}
	if s.callTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.callTimeout)
		defer cancel()
	}
	vals, err := s.readKeys(ctx, peeks)
	if err != nil {
		return fmt.Errorf("hot peek: %w", tiers.WrapUnavailable(err))
	}
	return fillValues(now, peeks, vals)
}

// fillPeeks is PeekFixed's answer from an MGET sent in a pipeline.
func fillPeeks(now time.Time, peeks []tiers.FixedPeek, mget *redis.SliceCmd) error {
	vals, err := mget.Result()
	if err != nil {
		return fmt.Errorf("hot peek: %w", tiers.WrapUnavailable(err))
	}
	return fillValues(now, peeks, vals)
}

// fillValues answers each peek whose key had a value (vals, in order).
func fillValues(now time.Time, peeks []tiers.FixedPeek, vals []any) error {
	if len(vals) != len(peeks) {
		return fmt.Errorf("hot peek: %d values for %d keys", len(vals), len(peeks))
	}
	ms := now.UnixMilli()
	for i := range peeks {
		p := &peeks[i]
		str, ok := vals[i].(string)
		if !ok {
			continue
		}
		used, err := strconv.ParseInt(str, 10, 64)
		if err != nil {
			return fmt.Errorf("hot peek: counter %q: %w", str, err)
		}
		p.Op.Out[p.Cell] = fixedOutcome(&p.Op.Cells[p.Cell], used, p.Op.Cost, ms, false)
		p.Found = true
	}
	return nil
}

// peekKeys are peeks' hot keys, in order.
func (s *Store) peekKeys(peeks []tiers.FixedPeek) []string {
	keys := make([]string, len(peeks))
	for i := range peeks {
		keys[i] = s.Key(&peeks[i].Op.Cells[peeks[i].Cell])
	}
	return keys
}

// readKeys returns the values of peeks' keys, in order (nil: missing).
func (s *Store) readKeys(ctx context.Context, peeks []tiers.FixedPeek) ([]any, error) {
	keys := s.peekKeys(peeks)
	if !s.splitBySlot {
		return s.rdb.MGet(ctx, keys...).Result()
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Get(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, err
	}
	vals := make([]any, len(keys))
	for i, c := range cmds {
		if v, err := c.Result(); err == nil {
			vals[i] = v
		}
	}
	return vals, nil
}
