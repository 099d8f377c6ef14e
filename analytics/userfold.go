package analytics

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// foldUserChunks folds the chunks of days before today into
// usage_user_daily rows, one (day, app, part) per transaction: the chunks'
// entries summed per (user, interface), upserted, and the chunks deleted,
// so a crash never counts an entry twice or loses it and a second run finds
// nothing left. It rests as the flush does (FlushDuty), since the fold of a
// finished day upserts as many rows as that day had per-user figures.
// It returns the rows upserted.
func (r *Recorder) foldUserChunks(ctx context.Context, conn *sql.Conn, today Day) (int64, error) {
	var rows int64
	var errs []error
	pace := newPacer(r.opt.FlushDuty, time.Now().Add(time.Hour), nil)
	// A cursor, so that a part that fails (a corrupt chunk) is reported
	// and passed over, not tried again and again before the others.
	day, app, part := "1000-01-01", "", -1 // before any day
	for {
		var next []byte
		err := conn.QueryRowContext(ctx, `SELECT DATE_FORMAT(day, '%Y-%m-%d'), app_id, part FROM usage_user_chunks
WHERE day < ? AND (day, app_id, part) > (?, ?, ?) ORDER BY day, app_id, part LIMIT 1`,
			today.String(), day, app, part).Scan(&day, &next, &part)
		if errors.Is(err, sql.ErrNoRows) {
			return rows, errors.Join(errs...)
		}
		if err != nil {
			return rows, errors.Join(append(errs, fmt.Errorf("user chunks to fold: %w", err))...)
		}
		app = string(next)
		n, err := r.foldUserPart(ctx, conn, pace, day, app, uint16(part))
		rows += int64(n)
		if err != nil {
			errs = append(errs, fmt.Errorf("fold user chunks of %q on %s: %w", app, day, err))
			if ctx.Err() != nil {
				return rows, errors.Join(errs...)
			}
		}
	}
}

// foldUserPart folds the chunks of one (day, app, part) in one transaction
// and returns the rows it upserted.
func (r *Recorder) foldUserPart(ctx context.Context, conn *sql.Conn, pace *pacer, day, app string, part uint16) (int, error) {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := lockedUserRows(ctx, tx, app, "SELECT body FROM usage_user_chunks WHERE day = ? AND app_id = ? AND part = ? FOR UPDATE", day, app, part)
	if err != nil {
		return 0, err
	}
	err = r.insert(ctx, tx, pace, "usage_user_daily", userCols, 7, len(rows), func(args []any, i int) []any {
		u := &rows[i]
		_, iface, user := u.id.split()
		return append(args, app, user, day, iface, u.Calls, u.Allowed, u.Denied)
	})
	if err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM usage_user_chunks WHERE day = ? AND app_id = ? AND part = ?", day, app, part); err != nil {
		return 0, fmt.Errorf("delete folded chunks: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	r.met.rowsWritten.WithLabelValues("usage_user_daily").Add(float64(len(rows)))
	return len(rows), nil
}

// mergeMinChunks is the number of an app's flush chunks (level 0) of the
// day from which Rollup merges them: about 8 minutes of 15 s flushes.
const mergeMinChunks = 32

// mergeTodayChunks merges, for each app with at least mergeMinChunks flush
// chunks today, those chunks into level-1 chunks, split into parts by the
// merged volume. Without it a query for one user of a quiet app would read
// every chunk of the day (up to 5,760 at 15 s flushes, each holding all of
// the app's users of its flush); with it, one chunk per merge and the few
// flush chunks since. It returns the apps merged.
func (r *Recorder) mergeTodayChunks(ctx context.Context, conn *sql.Conn, today Day) (int, error) {
	rows, err := conn.QueryContext(ctx,
		"SELECT app_id FROM usage_user_chunks WHERE day = ? AND level = 0 GROUP BY app_id HAVING COUNT(*) >= ?",
		today.String(), mergeMinChunks)
	if err != nil {
		return 0, fmt.Errorf("user chunks to merge: %w", err)
	}
	var apps []string
	for rows.Next() {
		var app []byte
		if err := rows.Scan(&app); err != nil {
			rows.Close()
			return 0, err
		}
		apps = append(apps, string(app))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	pace := newPacer(r.opt.FlushDuty, time.Now().Add(time.Hour), nil)
	var errs []error
	merged := 0
	for _, app := range apps {
		if err := r.mergeAppChunks(ctx, conn, pace, today, app); err != nil {
			errs = append(errs, fmt.Errorf("merge user chunks of %q: %w", app, err))
			continue
		}
		merged++
	}
	return merged, errors.Join(errs...)
}

// mergeAppChunks replaces app's flush chunks of day with level-1 chunks of
// the same entries summed, in one transaction.
func (r *Recorder) mergeAppChunks(ctx context.Context, conn *sql.Conn, pace *pacer, day Day, app string) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	d := day.String()
	rows, err := lockedUserRows(ctx, tx, app, "SELECT body FROM usage_user_chunks WHERE day = ? AND app_id = ? AND level = 0 FOR UPDATE", d, app)
	if err != nil || len(rows) == 0 {
		return err
	}
	for i := range rows {
		rows[i].day = day
	}
	chunks := appendAppChunks(nil, rows, chunkMaxRaw, &chunkBuffers{})
	for i := range chunks {
		chunks[i].level = 1
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM usage_user_chunks WHERE day = ? AND app_id = ? AND level = 0", d, app); err != nil {
		return fmt.Errorf("delete merged chunks: %w", err)
	}
	var id [16]byte
	_, _ = rand.Read(id[:])
	if err := r.insertChunks(ctx, tx, pace, id, chunks); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	r.met.rowsWritten.WithLabelValues("usage_user_chunks").Add(float64(len(chunks)))
	return nil
}

// lockedUserRows reads and locks the chunks of app that query selects (a
// flush writing one of them meanwhile waits for the commit) and returns
// their entries as app's user rows, summed per (user, interface) and in
// write order (sortGroupRows); their day is left zero.
func lockedUserRows(ctx context.Context, tx *sql.Tx, app, query string, args ...any) ([]userRow, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []userRow
	var buf []byte
	for rows.Next() {
		var body []byte
		if err := rows.Scan(&body); err != nil {
			return nil, err
		}
		err := eachUserEntry(body, func(user, iface string, c Counts) {
			buf = appendRowID(buf[:0], app, iface, user)
			out = append(out, newUserRow(userKey{id: rowID(buf)}, c))
		})
		if err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return sortGroupRows(out), nil
}
