package analytics

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Once a UTC day is over, Rollup seals each app's per-user figures of it:
// the day's chunks of every level (and its sealed chunks, when a late flush
// added to a sealed day) merged into one batch of usage_user_sealed, cut
// into parts as a merge cuts them. It used to fold them into
// usage_user_daily rows, which cost MariaDB many times more an entry
// (BenchmarkSealDay).

// seal seals every (day, app) with chunks of a day before today, one per
// transaction, resting as the flush does, and returns the pairs sealed.
func (u *userFigures) seal(ctx context.Context, conn *sql.Conn, today Day) (int, error) {
	pace := newPacer(u.duty, time.Now().Add(time.Hour), nil)
	var m chunkMerge // the merges' working set, reused
	var errs []error
	sealed := 0
	// A cursor: a (day, app) that fails (a corrupt chunk) is passed over.
	d, app := "1000-01-01", "" // before any day
	for {
		var next []byte
		err := conn.QueryRowContext(ctx, `SELECT DATE_FORMAT(day, '%Y-%m-%d'), app_id FROM usage_user_chunks
WHERE day < ? AND (day, app_id) > (?, ?) ORDER BY day, app_id LIMIT 1`,
			today.String(), d, app).Scan(&d, &next)
		if errors.Is(err, sql.ErrNoRows) {
			return sealed, errors.Join(errs...)
		}
		if err != nil {
			return sealed, errors.Join(append(errs, fmt.Errorf("user chunks to seal: %w", err))...)
		}
		app = string(next)
		day, err := ParseDay(d)
		if err == nil {
			err = u.sealAppDay(ctx, conn, pace, &m, day, app)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("seal user chunks of %q on %s: %w", app, d, err))
			if ctx.Err() != nil {
				return sealed, errors.Join(errs...)
			}
			continue
		}
		sealed++
	}
}

// sealAppDay replaces app's chunks of day, today's and sealed, with one
// sealed batch of the same entries summed.
func (u *userFigures) sealAppDay(ctx context.Context, conn *sql.Conn, pace *pacer, m *chunkMerge, day Day, app string) error {
	return u.rewriteChunks(ctx, conn, pace, m, chunkRewrite{
		from:  []chunkTable{todayChunks, sealedChunks},
		where: "day = ? AND app_id = ?",
		args:  []any{day.String(), app},
		day:   day,
		app:   app,
		to:    sealedChunks,
	})
}
