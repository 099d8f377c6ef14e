// Package denysync keeps the local denial caches of a fleet exact
// (limiter.Denials): whatever may let a cached denial in (a router refund,
// an admin reset, a report call counted in a closed cell) increments one
// Redis key, and every instance reads it on a period and drops its cache
// when it moved. Why a key read on a period rather than pub/sub: a
// message published while an instance is reconnecting is lost for good,
// a key read is not, and the read bounds the delay: an instance drops its
// cache at most one period plus one read's timeout (the period) after the
// increment, and when it cannot read the key it drops its cache at each
// failed read, so it never serves a denial it could not vouch for.
package denysync

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/tick"
)

// Sync is one instance's end of the fleet's invalidations.
type Sync struct {
	rdb   redis.UniversalClient
	key   string
	clear func()

	mu   sync.Mutex
	last string // the key's value at the last read
}

// New returns the sync of the key <prefix>denials:gen; clear drops the
// local cache (limiter.Denials.Clear).
func New(rdb redis.UniversalClient, prefix string, clear func()) *Sync {
	return &Sync{rdb: rdb, key: prefix + "denials:gen", clear: clear}
}

// Key is the Redis key every instance reads.
func (s *Sync) Key() string { return s.key }

// Bump drops the local cache and tells every instance to drop theirs.
func (s *Sync) Bump(ctx context.Context) error {
	s.clear()
	if err := s.rdb.Incr(ctx, s.key).Err(); err != nil {
		return fmt.Errorf("denial cache invalidation: %w", err)
	}
	return nil
}

// Poll reads the key once and drops the local cache when it moved since
// the last read, or when it cannot be read.
func (s *Sync) Poll(ctx context.Context) error {
	v, err := s.rdb.Get(ctx, s.key).Result()
	if errors.Is(err, redis.Nil) {
		v, err = "", nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.clear()
		return fmt.Errorf("denial cache sync: %w", err)
	}
	if v != s.last {
		s.last = v
		s.clear()
	}
	return nil
}

// Run polls every period until ctx ends, each read bounded by the period.
func (s *Sync) Run(ctx context.Context, every time.Duration) {
	tick.Every(ctx, every, func() {
		pctx, cancel := context.WithTimeout(ctx, every)
		defer cancel()
		_ = s.Poll(pctx)
	})
}
