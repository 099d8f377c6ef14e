package analytics

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/quota-platform/quota/analytics/usage"
	"github.com/quota-platform/quota/analytics/userdays"
	"github.com/quota-platform/quota/clock"
)

// rollStep moves points of one resolution into the next coarser one once
// they are older than the finer resolution's retention.
type rollStep struct {
	fine, coarse Resolution
	keep         time.Duration // retention of the fine points
	chunk        int64         // seconds of fine points per transaction
}

var rollSteps = []rollStep{
	{Res1m, Res5m, Keep1m, 3600},
	{Res5m, Res1h, Keep5m, 86400},
	{Res1h, Res1w, Keep1h, int64(Res1w)},
}

// Rollup is the scheduled job of analytics (QUOTA_ROLLUP_SCHEDULE).
type Rollup struct {
	clk   clock.Clock
	days  Days
	dbs   usage.Shards
	users *userdays.Store
	uniq  *uniques
}

// RollupResult says what one Rollup did.
type RollupResult struct {
	Periods    int   // transactions that moved points
	Moved      int64 // fine points folded into coarse ones (and deleted)
	SealedDays int   // (day, app) pairs of finished days whose user chunks were sealed (userdays.Store.Seal)
	UserMerges int   // merges of today's user chunks: one per app and level merged
}

// Run folds curve points past their resolution's retention into the next
// coarser resolution, on every shard, each chunk of points added and
// deleted in one transaction (a crash neither doubles nor loses a call; a
// second run finds nothing to move). Instances take turns per shard through
// a named lock. It also merges today's per-user chunks and seals finished
// days', saves finished days' distinct-user registers and forgets flush
// batch ids older than two days.
func (r *Rollup) Run(ctx context.Context) (RollupResult, error) {
	var total RollupResult
	now := r.clk.Now()
	var errs []error
	for i, db := range r.dbs {
		res, err := r.rollupShard(ctx, db, now)
		total.Periods += res.Periods
		total.Moved += res.Moved
		total.SealedDays += res.SealedDays
		total.UserMerges += res.UserMerges
		if err != nil {
			errs = append(errs, fmt.Errorf("shard %d: %w", i, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return total, err
	}
	// Finished days' interface-level registers.
	if err := r.uniq.persist(ctx, false, false); err != nil {
		return total, fmt.Errorf("persist HLL: %w", err)
	}
	return total, nil
}

func (r *Rollup) rollupShard(ctx context.Context, db *sql.DB, now time.Time) (RollupResult, error) {
	var res RollupResult
	conn, err := db.Conn(ctx)
	if err != nil {
		return res, fmt.Errorf("connection: %w", err)
	}
	defer conn.Close()
	var dbName sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&dbName); err != nil {
		return res, fmt.Errorf("database name: %w", err)
	}
	lock := "quota_rollup:" + dbName.String
	if len(lock) > 64 {
		lock = fmt.Sprintf("quota_rollup:%016x", usage.FNV1a64(dbName.String))
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 10)", lock).Scan(&got); err != nil {
		return res, fmt.Errorf("rollup lock: %w", err)
	}
	if got.Int64 != 1 {
		return res, nil // another instance is rolling this shard up
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK(?)", lock)
	}()
	for _, st := range rollSteps {
		cutoff := st.coarse.Floor(now.Add(-st.keep).Unix())
		for {
			var minT sql.NullInt64
			if err := conn.QueryRowContext(ctx, "SELECT MIN(t) FROM usage_series WHERE res = ? AND t < ?",
				int64(st.fine), cutoff).Scan(&minT); err != nil {
				return res, fmt.Errorf("oldest %s point: %w", st.fine, err)
			}
			if !minT.Valid {
				break
			}
			lo := st.coarse.Floor(minT.Int64)
			hi := min(lo+max(st.chunk, int64(st.coarse)), cutoff)
			n, err := r.rollChunk(ctx, conn, st, lo, hi)
			if err != nil {
				return res, err
			}
			res.Periods++
			res.Moved += n
		}
	}
	today := r.days.Of(now)
	// Today's merges first, and each step whatever the others' errors: a
	// day that cannot be sealed (a corrupt chunk) fails every run.
	var errs []error
	merges, err := r.users.Merge(ctx, conn, today)
	res.UserMerges = merges
	if err != nil {
		errs = append(errs, err)
	}
	sealed, err := r.users.Seal(ctx, conn, today)
	res.SealedDays = sealed
	if err != nil {
		errs = append(errs, err)
	}
	if _, err := conn.ExecContext(ctx, "DELETE FROM analytics_batches WHERE created_at < NOW() - INTERVAL 2 DAY"); err != nil {
		errs = append(errs, fmt.Errorf("forget old batch ids: %w", err))
	}
	return res, errors.Join(errs...)
}

// rollChunk adds the fine points with lo <= t < hi to their coarse points
// and deletes them, in one transaction.
func (r *Rollup) rollChunk(ctx context.Context, conn *sql.Conn, st rollStep, lo, hi int64) (int64, error) {
	off := int64(0)
	if st.coarse == Res1w {
		off = weekOffset
	}
	w := int64(st.coarse)
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	// t >= lo >= off, so integer division floors.
	if _, err := tx.ExecContext(ctx, `INSERT INTO usage_series (app_id, res, t, interface_id, calls, allowed, denied)
SELECT app_id, ?, (t - ?) DIV ? * ? + ?, interface_id, SUM(calls), SUM(allowed), SUM(denied)
FROM usage_series WHERE res = ? AND t >= ? AND t < ?
GROUP BY app_id, (t - ?) DIV ?, interface_id`+addCounts,
		w, off, w, w, off, int64(st.fine), lo, hi, off, w); err != nil {
		return 0, fmt.Errorf("roll %s into %s: %w", st.fine, st.coarse, err)
	}
	del, err := tx.ExecContext(ctx, "DELETE FROM usage_series WHERE res = ? AND t >= ? AND t < ?", int64(st.fine), lo, hi)
	if err != nil {
		return 0, fmt.Errorf("delete rolled %s points: %w", st.fine, err)
	}
	n, _ := del.RowsAffected()
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit the roll of %s points: %w", st.fine, err)
	}
	return n, nil
}
