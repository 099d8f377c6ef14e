package worker

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/quota-platform/quota/migrate"
	"github.com/quota-platform/quota/migrate/activity"
)

// Between cycles, each activity flush appends rows to cell_activity_log
// (activity.go) and only a cycle folds them into cell_activity. With the
// default daily schedule the log would hold a day of flushes: about 40
// bytes a cell a flush, near one cell a check when calls spread over many
// cells. FoldLongLogs bounds it: a part holding more than LogMaxRows rows
// is folded at once, by one instance.

func (w *Worker) logCheckEvery() time.Duration {
	if w.Config.LogCheckEvery > 0 {
		return w.Config.LogCheckEvery
	}
	return time.Minute
}

// logFoldTTL bounds how long a crashed instance keeps a part's fold from
// the others. The lock only saves work: two folds of one part at once
// count each row once all the same (activity.FoldLog), the loser rolls back.
const logFoldTTL = 2 * time.Minute

// FoldLongLogs folds the parts whose log holds more than LogMaxRows rows
// (LogMaxRows 0: none) and returns the cell entries it folded.
func (w *Worker) FoldLongLogs(ctx context.Context) (int, error) {
	if w.Config.LogMaxRows <= 0 {
		return 0, nil
	}
	folded := 0
	var errs []error
	for sh, db := range w.DBs {
		parts, err := longLogParts(ctx, db, w.Config.LogMaxRows)
		if err != nil {
			errs = append(errs, fmt.Errorf("shard %d: %w", sh, err))
			continue
		}
		for _, part := range parts {
			n, err := w.foldPartLocked(ctx, sh, part)
			folded += n
			if err != nil {
				errs = append(errs, fmt.Errorf("shard %d part %d: %w", sh, part, err))
			}
		}
	}
	return folded, errors.Join(errs...)
}

// longLogParts returns the parts of a shard whose log holds more than maxRows rows.
func longLogParts(ctx context.Context, db *sql.DB, maxRows int) ([]int, error) {
	rows, err := db.QueryContext(ctx, "SELECT part FROM cell_activity_log GROUP BY part HAVING COUNT(*) > ?", maxRows)
	if err != nil {
		return nil, fmt.Errorf("activity log size: %w", err)
	}
	defer rows.Close()
	var parts []int
	for rows.Next() {
		var p int
		if err := rows.Scan(&p); err != nil {
			return nil, fmt.Errorf("activity log size: %w", err)
		}
		parts = append(parts, p)
	}
	return parts, rows.Err()
}

// foldPartLocked folds one part of a shard's log under a Redis lock; a
// part another instance is folding is skipped.
func (w *Worker) foldPartLocked(ctx context.Context, sh, part int) (int, error) {
	rdb := w.Mover.RDB
	key := w.Mover.Prefix + "mig:logfold:" + strconv.Itoa(sh) + ":" + strconv.Itoa(part)
	token := strconv.FormatUint(rand.Uint64(), 36)
	ok, err := rdb.SetNX(ctx, key, token, logFoldTTL).Result()
	if err != nil || !ok {
		return 0, err
	}
	defer migrate.ReleaseKey(context.WithoutCancel(ctx), rdb, key, token)
	return activity.FoldLog(ctx, w.DBs[sh], part)
}
