package throttled

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"sort"
	"strings"
	"time"

	"github.com/quota-platform/quota/analytics/usage"
)

// throttledPerStatement bounds the rows of one upsert.
const throttledPerStatement = 500

// Flush adds the counts of every summary since the last flush to MySQL,
// one transaction per shard, then prunes the keys this instance has
// written KeepRows/2 new identities to since it last pruned them. Counts
// of a shard that fails stay pending for the next flush.
func (t *Throttled) Flush(ctx context.Context) error {
	t.flushMu.Lock()
	defer t.flushMu.Unlock()
	today := t.days.Of(t.clk.Now())
	var errs []error
	if t.expired != today {
		if err := t.expire(ctx, today-usage.Day(t.opt.KeepDays)); err != nil {
			errs = append(errs, err)
		} else {
			t.expired = today
		}
	}
	errs = append(errs, t.resolveUncertain(ctx)...)
	rows := t.takeDeltas(today)
	if len(rows) == 0 {
		return errors.Join(errs...)
	}
	byShard := map[int][]throttledRow{}
	for _, r := range rows {
		i := usage.ShardIndex(r.key.app, len(t.dbs))
		byShard[i] = append(byShard[i], r)
	}
	for i, rs := range byShard {
		var id [16]byte
		_, _ = rand.Read(id[:])
		if uncertain, err := t.write(ctx, t.dbs[i], id, rs); err != nil {
			if uncertain {
				// The COMMIT may have happened: the next flush looks the
				// batch id up before putting these counts back.
				t.uncertain = append(t.uncertain, throttledBatch{shard: i, id: id, rows: rs})
			} else {
				t.restore(rs)
			}
			errs = append(errs, fmt.Errorf("throttled: shard %d: %w", i, err))
			continue
		}
		for _, k := range t.dueForPrune(rs) {
			if err := t.prune(ctx, t.dbs[i], k); err != nil {
				errs = append(errs, fmt.Errorf("throttled: prune shard %d: %w", i, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Run flushes every period until ctx ends, then flushes once more (with
// a 30 s bound) so that a graceful shutdown writes what is pending.
func (t *Throttled) Run(ctx context.Context, every time.Duration, onError func(error)) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := t.Flush(fctx); err != nil {
				onError(err)
			}
			return
		case <-tk.C:
			if err := t.Flush(ctx); err != nil {
				onError(err)
			}
		}
	}
}

func identityHash(id string) []byte {
	h := md5.Sum([]byte(id))
	return h[:]
}

// throttledBatch is a flush's counts for one shard whose COMMIT answer was
// lost; its id is in analytics_batches if it was committed.
type throttledBatch struct {
	shard int
	id    [16]byte
	rows  []throttledRow
}

// resolveUncertain looks up the batches whose COMMIT answer was lost: the
// counts of one that was not committed are put back for this flush.
func (t *Throttled) resolveUncertain(ctx context.Context) []error {
	var errs []error
	keep := t.uncertain[:0]
	for _, b := range t.uncertain {
		var one int
		err := t.dbs[b.shard].QueryRowContext(ctx, "SELECT 1 FROM analytics_batches WHERE batch_id = ?", b.id[:]).Scan(&one)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			t.restore(b.rows)
		case err != nil:
			keep = append(keep, b)
			errs = append(errs, fmt.Errorf("throttled: look up batch on shard %d: %w", b.shard, err))
		}
	}
	t.uncertain = keep
	return errs
}

// write adds rows to shard db in one transaction that also records its
// batch id; uncertain says that an error came from the COMMIT, which may
// have happened.
func (t *Throttled) write(ctx context.Context, db *sql.DB, id [16]byte, rows []throttledRow) (uncertain bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit: ErrTxDone
	for lo := 0; lo < len(rows); lo += throttledPerStatement {
		part := rows[lo:min(len(rows), lo+throttledPerStatement)]
		var q strings.Builder
		q.WriteString("INSERT INTO throttled_identities (app_id, day, rule, identity_hash, dimensions, denied, max_overcount) VALUES ")
		args := make([]any, 0, 7*len(part))
		for i, r := range part {
			if i > 0 {
				q.WriteByte(',')
			}
			q.WriteString("(?,?,?,?,?,?,?)")
			dims, err := json.Marshal(decodeIdentity(r.id))
			if err != nil {
				return false, err
			}
			args = append(args, r.key.app, r.key.day.String(), r.key.rule, identityHash(r.id), dims, r.count, r.over)
		}
		q.WriteString(" ON DUPLICATE KEY UPDATE denied = denied + VALUES(denied), max_overcount = max_overcount + VALUES(max_overcount)")
		if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
			return false, err
		}
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO analytics_batches (batch_id) VALUES (?)", id[:]); err != nil {
		return false, fmt.Errorf("analytics_batches: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return true, err
	}
	return false, nil
}

// dueForPrune counts the new rows written per key and returns the keys
// past KeepRows/2 new rows since their last prune (resetting their count).
func (t *Throttled) dueForPrune(rows []throttledRow) []sumKey {
	added := map[sumKey]int{}
	for _, r := range rows {
		if r.newRow {
			added[r.key]++
		}
	}
	var due []sumKey
	for k, n := range added {
		var h = t.shardOf(k.app)
		h.mu.Lock()
		s := h.sums[k]
		if s == nil { // its day is over and it was dropped: prune it now
			due = append(due, k)
		} else if s.newRows += n; s.newRows > t.opt.KeepRows/2 {
			s.newRows = 0
			due = append(due, k)
		}
		h.mu.Unlock()
	}
	return due
}

// expire deletes the rows of days before before on every shard, 10,000
// rows a statement.
func (t *Throttled) expire(ctx context.Context, before usage.Day) error {
	for i, db := range t.dbs {
		for {
			res, err := db.ExecContext(ctx, `DELETE FROM throttled_identities WHERE day < ? LIMIT 10000`, before.String())
			if err != nil {
				return fmt.Errorf("throttled: expire shard %d: %w", i, err)
			}
			if n, err := res.RowsAffected(); err != nil || n < 10000 {
				break
			}
		}
	}
	return nil
}

// prune deletes the rows of k past its KeepRows most denied.
func (t *Throttled) prune(ctx context.Context, db *sql.DB, k sumKey) error {
	var floor int64
	err := db.QueryRowContext(ctx, `SELECT denied FROM throttled_identities WHERE app_id = ? AND day = ? AND rule = ?
		ORDER BY denied DESC LIMIT 1 OFFSET ?`, k.app, k.day.String(), k.rule, t.opt.KeepRows).Scan(&floor)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, `DELETE FROM throttled_identities WHERE app_id = ? AND day = ? AND rule = ? AND denied <= ?`,
		k.app, k.day.String(), k.rule, floor)
	return err
}

// Throttled is one identity's denials: Denied is an upper bound, and
// Denied - MaxOvercount a lower bound (equal when MaxOvercount is 0: the
// identity was counted exactly).
type ThrottledIdentity struct {
	Dimensions   map[string]string
	Denied       int64
	MaxOvercount int64
}

// RuleThrottled is the most denied identities of one rule.
type RuleThrottled struct {
	Rule string
	Top  []ThrottledIdentity
}

// Top is, for each rule that denied app on day, its n most denied
// identities, most denied first (rules by name): MySQL's rows plus what
// this instance has not flushed yet.
func (t *Throttled) Top(ctx context.Context, app string, day usage.Day, n int) ([]RuleThrottled, error) {
	type acc struct {
		dims        []byte
		id          string
		count, over int64
	}
	byRule := map[string]map[string]*acc{} // rule -> identity hash -> counts
	add := func(rule, hash string, a acc) {
		m := byRule[rule]
		if m == nil {
			m = map[string]*acc{}
			byRule[rule] = m
		}
		if cur := m[hash]; cur != nil {
			cur.count += a.count
			cur.over += a.over
			return
		}
		m[hash] = &a
	}
	rows, err := t.dbs.Of(app).QueryContext(ctx, `SELECT rule, identity_hash, dimensions, denied, max_overcount
		FROM throttled_identities WHERE app_id = ? AND day = ?`, app, day.String())
	if err != nil {
		return nil, fmt.Errorf("throttled: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var rule, hash string
		var a acc
		if err := rows.Scan(&rule, &hash, &a.dims, &a.count, &a.over); err != nil {
			return nil, fmt.Errorf("throttled: %w", err)
		}
		add(rule, hash, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("throttled: %w", err)
	}
	for _, r := range t.unflushed(app, day) {
		add(r.key.rule, string(identityHash(r.id)), acc{id: r.id, count: r.count, over: r.over})
	}
	out := make([]RuleThrottled, 0, len(byRule))
	for rule, m := range byRule {
		all := make([]*acc, 0, len(m))
		for _, a := range m {
			all = append(all, a)
		}
		sort.Slice(all, func(i, j int) bool {
			if all[i].count != all[j].count {
				return all[i].count > all[j].count
			}
			return all[i].over < all[j].over
		})
		rt := RuleThrottled{Rule: rule}
		for _, a := range all[:min(n, len(all))] {
			ti := ThrottledIdentity{Denied: a.count, MaxOvercount: a.over}
			if a.dims != nil {
				if err := json.Unmarshal(a.dims, &ti.Dimensions); err != nil {
					return nil, fmt.Errorf("throttled: dimensions of %s: %w", rule, err)
				}
			} else {
				ti.Dimensions = decodeIdentity(a.id)
			}
			rt.Top = append(rt.Top, ti)
		}
		out = append(out, rt)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rule < out[j].Rule })
	return out, nil
}

// shardOf is the summaries' shard of app's.
func (t *Throttled) shardOf(app string) *throttledShard {
	return &t.shards[maphash.String(t.seed, app)&uint64(len(t.shards)-1)]
}
