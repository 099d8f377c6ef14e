package analytics

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

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

// persistChunk is how many HyperLogLogs one persisting step reads from
// MySQL (one SELECT), reads and merges in Redis (one pipeline) and saves
// (one multi-row upsert): a dense HLL is 12 KB, so a statement stays near
// 2.4 MB, under MySQL's default 16 MB max_allowed_packet.
const persistChunk = 200

// persistHLL saves the registers of the touched HyperLogLogs to MySQL: the
// app-level keys of every day, interface-level keys once their day is over
// (all of them when final). The saved registers are first merged back into
// Redis, so a key that Redis lost (and that has been re-created since with
// fewer users) never overwrites a fuller saved copy. Keys go in chunks, a
// few round trips each, so that a shutdown persisting tens of thousands of
// keys fits its time budget; a shard that fails keeps its keys for the
// next run and does not stop the others.
func (r *Recorder) persistHLL(ctx context.Context, final bool) error {
	today := DayOf(r.clk.Now())
	byShard := make([][]hllKey, len(r.shards))
	for k := range r.touched {
		if final || k.scope == scopeApp || k.day < today {
			i := ShardIndex(k.app, len(r.shards))
			byShard[i] = append(byShard[i], k)
		}
	}
	var errs []error
	for i, keys := range byShard {
		for chunk := range slices.Chunk(keys, persistChunk) {
			if err := r.persistKeys(ctx, r.shards[i].db, chunk); err != nil {
				errs = append(errs, fmt.Errorf("shard %d: %w", i, err))
				break
			}
			r.mu.Lock()
			for _, k := range chunk {
				delete(r.touched, k)
			}
			r.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// persistKeys saves the registers of keys, all on the shard db.
func (r *Recorder) persistKeys(ctx context.Context, db *sql.DB, keys []hllKey) error {
	saved, err := loadRegistersOf(ctx, db, keys)
	if err != nil {
		return fmt.Errorf("usage_uniques read: %w", err)
	}
	regs, counts, err := r.mergeAndRead(ctx, keys, saved)
	if err != nil {
		return err
	}
	var q strings.Builder
	q.WriteString("INSERT INTO usage_uniques (app_id, day, scope, interface_id, unique_users, registers) VALUES ")
	args := make([]any, 0, 6*len(keys))
	n := 0
	for i, k := range keys {
		if regs[i] == nil {
			continue // nothing in Redis, nothing saved: no user that day
		}
		if n > 0 {
			q.WriteByte(',')
		}
		q.WriteString("(?, ?, ?, ?, ?, ?)")
		args = append(args, k.app, k.day.String(), k.scope, k.iface, counts[i], regs[i])
		n++
	}
	if n == 0 {
		return nil
	}
	q.WriteString(" ON DUPLICATE KEY UPDATE unique_users = VALUES(unique_users), registers = VALUES(registers)")
	r.met.statements.WithLabelValues("usage_uniques").Inc()
	if _, err := db.ExecContext(ctx, q.String(), args...); err != nil {
		return fmt.Errorf("usage_uniques: %w", err)
	}
	r.met.rowsWritten.WithLabelValues("usage_uniques").Add(float64(n))
	return nil
}

// mergeAndRead merges the saved registers into Redis and reads each key's
// registers and count back, in one pipeline. regs[i] is nil when Redis has
// no such key.
func (r *Recorder) mergeAndRead(ctx context.Context, keys []hllKey, saved map[hllKey]savedHLL) ([][]byte, []int64, error) {
	pipe := r.rdb.Pipeline()
	gets := make([]*redis.StringCmd, len(keys))
	cnts := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		rk := k.redisKey(r.opt.KeyPrefix)
		if regs := saved[k].regs; regs != nil {
			tmp := rk + ":merge" // same {tag}: same cluster slot as rk
			pipe.Set(ctx, tmp, regs, r.opt.HLLTTL)
			pipe.PFMerge(ctx, rk, tmp)
			pipe.Del(ctx, tmp)
			pipe.Expire(ctx, rk, r.opt.HLLTTL)
		}
		gets[i] = pipe.Get(ctx, rk)
		cnts[i] = pipe.PFCount(ctx, rk)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("redis HLL read: %w", err)
	}
	regs := make([][]byte, len(keys))
	counts := make([]int64, len(keys))
	for i := range keys {
		b, err := gets[i].Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("redis HLL read: %w", err)
		}
		regs[i], counts[i] = b, cnts[i].Val()
	}
	return regs, counts, nil
}

// savedHLL is a HyperLogLog as usage_uniques keeps it.
type savedHLL struct {
	regs  []byte // the Redis HLL value
	users int64  // its count when saved
}

// loadRegistersOf reads the saved registers of keys (all on db), one
// SELECT per persistChunk keys; keys without a saved row are absent.
func loadRegistersOf(ctx context.Context, db *sql.DB, keys []hllKey) (map[hllKey]savedHLL, error) {
	out := make(map[hllKey]savedHLL, len(keys))
	for chunk := range slices.Chunk(keys, persistChunk) {
		if err := loadRegisterChunk(ctx, db, chunk, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func loadRegisterChunk(ctx context.Context, db *sql.DB, keys []hllKey, out map[hllKey]savedHLL) error {
	var q strings.Builder
	q.WriteString("SELECT app_id, day, scope, interface_id, registers, unique_users FROM usage_uniques WHERE ")
	args := make([]any, 0, 4*len(keys))
	for i, k := range keys {
		if i > 0 {
			q.WriteString(" OR ")
		}
		q.WriteString("(app_id = ? AND day = ? AND scope = ? AND interface_id = ?)")
		args = append(args, k.app, k.day.String(), k.scope, k.iface)
	}
	rows, err := db.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k hllKey
		var day string
		var h savedHLL
		if err := rows.Scan(&k.app, &day, &k.scope, &k.iface, &h.regs, &h.users); err != nil {
			return err
		}
		if k.day, err = parseSQLDay(day); err != nil {
			return err
		}
		out[k] = h
	}
	return rows.Err()
}

// parseSQLDay reads a DATE column as the driver returns it: "YYYY-MM-DD"
// without parseTime, an RFC 3339 time with it.
func parseSQLDay(s string) (Day, error) {
	if len(s) > len(time.DateOnly) {
		s = s[:len(time.DateOnly)]
	}
	return ParseDay(s)
}

// uniqueCount is the number of distinct users over the union of keys (all of
// one app, so of one shard): Redis's live registers, the saved ones (for keys Redis no longer
// has) and extra users not yet added. Without Redis it falls back to the
// largest saved count.
func (r *Recorder) uniqueCount(ctx context.Context, keys []hllKey, extra map[hllKey][]string) (int64, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	found, err := loadRegistersOf(ctx, r.shards[ShardIndex(keys[0].app, len(r.shards))].db, keys)
	if err != nil {
		return 0, err
	}
	var fallback int64
	saved := make([][]byte, len(keys))
	for i, k := range keys {
		saved[i] = found[k].regs
		fallback = max(fallback, found[k].users)
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
