package analytics

import (
	"context"
	"database/sql"
	"encoding/binary"
	"sync"

	"github.com/golang/snappy"
)

// EVALUATION ONLY (issue 34): per-user figures as one row per (day, app,
// user) with its interface map, the alternative to the chunks. A flush
// appends each user's map of the flush, snappy-compressed, to the row's
// body (ON DUPLICATE KEY UPDATE body = CONCAT(body, …)): no read, one
// upserted row per (app, user) of the flush.

const userDaysDDL = `CREATE TABLE IF NOT EXISTS usage_user_days (
  day DATE NOT NULL,
  app_id VARBINARY(256) NOT NULL,
  user_id VARBINARY(256) NOT NULL,
  body MEDIUMBLOB NOT NULL,
  PRIMARY KEY (day, app_id, user_id)
) ENGINE=InnoDB`

// writePerUser writes p's user rows as one row per (day, app, user).
func (u *userFigures) writePerUser(ctx context.Context, tx *sql.Tx, pace *pacer, p *rowset, mu sync.Locker) (int, error) {
	type userDayRow struct {
		day       Day
		app, user string
		body      []byte
	}
	var out []userDayRow
	var raw []byte
	for _, g := range p.userGroups() {
		mu.Lock()
		p.sortGroup(g)
		mu.Unlock()
		for lo := 0; lo < len(g.rows); {
			_, _, user := g.rows[lo].id.split()
			raw = raw[:0]
			hi := lo
			for ; hi < len(g.rows); hi++ {
				_, iface, us := g.rows[hi].id.split()
				if us != user {
					break
				}
				raw = binary.AppendUvarint(raw, uint64(len(iface)))
				raw = append(raw, iface...)
				c := g.rows[hi].Counts
				raw = binary.AppendUvarint(raw, uint64(c.Calls))
				raw = binary.AppendUvarint(raw, uint64(c.Allowed))
				raw = binary.AppendUvarint(raw, uint64(c.Denied))
			}
			seg := snappy.Encode(nil, raw)
			body := binary.AppendUvarint(make([]byte, 0, len(seg)+2), uint64(len(seg)))
			body = append(body, seg...)
			out = append(out, userDayRow{day: g.day, app: g.app, user: user, body: body})
			lo = hi
		}
	}
	var days dayStrings
	err := insertRows(ctx, tx, pace, u.perStatement, u.met, "usage_user_days", "day, app_id, user_id, body", 4, len(out),
		" ON DUPLICATE KEY UPDATE body = CONCAT(body, VALUES(body))",
		func(args []any, i int) []any {
			r := &out[i]
			return append(args, days.of(r.day), r.app, r.user, r.body)
		})
	return len(out), err
}

// insertRows is Flusher.insert with its suffix.
func insertRows(ctx context.Context, tx *sql.Tx, pace *pacer, per int, met *collectors, table, cols string, ncols, n int, suffix string, row func(args []any, i int) []any) error {
	var full *sql.Stmt
	defer func() {
		if full != nil {
			full.Close()
		}
	}()
	args := make([]any, 0, min(per, n)*ncols)
	for lo := 0; lo < n; lo += per {
		hi := min(lo+per, n)
		args = args[:0]
		for i := lo; i < hi; i++ {
			args = row(args, i)
		}
		var err error
		met.statements.WithLabelValues(table).Inc()
		if hi-lo == per {
			if full == nil {
				if full, err = tx.PrepareContext(ctx, valuesSQL(table, cols, ncols, per, suffix)); err != nil {
					return err
				}
			}
			_, err = full.ExecContext(ctx, args...)
		} else {
			_, err = tx.ExecContext(ctx, valuesSQL(table, cols, ncols, hi-lo, suffix), args...)
		}
		if err != nil {
			return err
		}
		pace.rest(ctx)
	}
	return nil
}
