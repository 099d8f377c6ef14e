package analytics

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

const (
	pfaddChunk    = 1000 // users per PFADD
	pipelineChunk = 2000 // commands per pipeline round trip
)

// pfaddPending adds the pending distinct users to their HyperLogLogs, in
// pipelines. PFADD is idempotent, so a pipeline that failed half-way is
// simply sent again.
func (r *Recorder) pfaddPending(ctx context.Context) error {
	if len(r.hllPending) == 0 {
		return nil
	}
	keys := make([]hllKey, 0, len(r.hllPending))
	for k := range r.hllPending {
		keys = append(keys, k)
	}
	ttl := r.opt.HLLTTL
	for lo := 0; lo < len(keys); {
		pipe := r.rdb.Pipeline()
		cmds := 0
		hi := lo
		for ; hi < len(keys) && cmds < pipelineChunk; hi++ {
			k := keys[hi]
			rk := k.redisKey(r.opt.KeyPrefix)
			args := make([]any, 0, min(pfaddChunk, len(r.hllPending[k])))
			for u := range r.hllPending[k] {
				args = append(args, u)
				if len(args) == pfaddChunk {
					pipe.PFAdd(ctx, rk, args...)
					cmds++
					args = args[:0]
				}
			}
			if len(args) > 0 {
				pipe.PFAdd(ctx, rk, args...)
				cmds++
			}
			pipe.Expire(ctx, rk, ttl)
			cmds++
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		r.mu.Lock()
		for _, k := range keys[lo:hi] {
			delete(r.hllPending, k)
		}
		r.mu.Unlock()
		lo = hi
	}
	return nil
}

// loadRegisters reads the saved registers of k (nil when none).
func (r *Recorder) loadRegisters(ctx context.Context, k hllKey) ([]byte, int64, error) {
	db := r.shards[ShardIndex(k.app, len(r.shards))].db
	var regs []byte
	var n int64
	err := db.QueryRowContext(ctx,
		"SELECT registers, unique_users FROM usage_uniques WHERE app_id = ? AND day = ? AND scope = ? AND interface_id = ?",
		k.app, k.day.String(), k.scope, k.iface).Scan(&regs, &n)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, nil
	}
	return regs, n, err
}

// persistHLL saves the registers of the touched HyperLogLogs to MySQL: the
// app-level keys of every day, interface-level keys once their day is over
// (all of them when final). The saved registers are first merged back into
// Redis, so a key that Redis lost (and that has been re-created since with
// fewer users) never overwrites a fuller saved copy.
func (r *Recorder) persistHLL(ctx context.Context, final bool) error {
	today := DayOf(r.clk.Now())
	var keys []hllKey
	for k := range r.touched {
		if final || k.scope == scopeApp || k.day < today {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if err := r.persistOne(ctx, k); err != nil {
			return err
		}
		r.mu.Lock()
		delete(r.touched, k)
		r.mu.Unlock()
	}
	return nil
}

func (r *Recorder) persistOne(ctx context.Context, k hllKey) error {
	saved, _, err := r.loadRegisters(ctx, k)
	if err != nil {
		return err
	}
	rk := k.redisKey(r.opt.KeyPrefix)
	pipe := r.rdb.TxPipeline()
	if saved != nil {
		tmp := rk + ":merge"
		pipe.Set(ctx, tmp, saved, r.opt.HLLTTL)
		pipe.PFMerge(ctx, rk, tmp)
		pipe.Del(ctx, tmp)
		pipe.Expire(ctx, rk, r.opt.HLLTTL)
	}
	get := pipe.Get(ctx, rk)
	cnt := pipe.PFCount(ctx, rk)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	regs, err := get.Bytes()
	if errors.Is(err, redis.Nil) {
		return nil // nothing in Redis, nothing saved: no user that day
	}
	if err != nil {
		return err
	}
	db := r.shards[ShardIndex(k.app, len(r.shards))].db
	_, err = db.ExecContext(ctx, `INSERT INTO usage_uniques (app_id, day, scope, interface_id, unique_users, registers)
VALUES (?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE unique_users = VALUES(unique_users), registers = VALUES(registers)`,
		k.app, k.day.String(), k.scope, k.iface, cnt.Val(), regs)
	r.met.statements.WithLabelValues("usage_uniques").Inc()
	if err != nil {
		return fmt.Errorf("usage_uniques: %w", err)
	}
	r.met.rowsWritten.WithLabelValues("usage_uniques").Inc()
	return nil
}

// uniqueCount is the number of distinct users over the union of keys (all of
// one app): Redis's live registers, the saved ones (for keys Redis no longer
// has) and extra users not yet added. Without Redis it falls back to the
// largest saved count.
func (r *Recorder) uniqueCount(ctx context.Context, keys []hllKey, extra map[hllKey][]string) (int64, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	var fallback int64
	saved := make([][]byte, len(keys))
	for i, k := range keys {
		regs, n, err := r.loadRegisters(ctx, k)
		if err != nil {
			return 0, err
		}
		saved[i] = regs
		fallback = max(fallback, n)
	}
	pipe := r.rdb.TxPipeline()
	count := make([]string, 0, 2*len(keys))
	var tmps []string
	for i, k := range keys {
		rk := k.redisKey(r.opt.KeyPrefix)
		if users := extra[k]; len(users) > 0 {
			for lo := 0; lo < len(users); lo += pfaddChunk {
				args := make([]any, 0, min(pfaddChunk, len(users)-lo))
				for _, u := range users[lo:min(lo+pfaddChunk, len(users))] {
					args = append(args, u)
				}
				pipe.PFAdd(ctx, rk, args...)
			}
			pipe.Expire(ctx, rk, r.opt.HLLTTL)
		}
		count = append(count, rk)
		if saved[i] != nil {
			tmp := fmt.Sprintf("%s:read:%d", rk, i)
			pipe.Set(ctx, tmp, saved[i], r.opt.HLLTTL)
			tmps = append(tmps, tmp)
			count = append(count, tmp)
		}
	}
	res := pipe.PFCount(ctx, count...)
	if len(tmps) > 0 {
		pipe.Del(ctx, tmps...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		r.log.Warn("analytics: distinct users from Redis failed; answering the saved count", "err", err)
		return fallback, nil
	}
	return res.Val(), nil
}
