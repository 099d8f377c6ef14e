package analytics

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"

	"github.com/quota-platform/quota/analytics/usage"
)

// userFigures keeps the per-user figures as compressed chunks per (day,
// app) (userchunk.go): a flush writes a batch of chunks, Rollup merges the
// day's batches (userfold.go) and seals them once it is over (userfold.go).
type userFigures struct {
	perStatement int     // Options.RowsPerStatement
	duty         float64 // Options.FlushDuty, for merges and seals
	met          *collectors
}

// write writes the user rows of p (a flush's, sorted under mu: readers
// range over them) as one batch of chunks in tx and returns the chunks
// written.
func (u *userFigures) write(ctx context.Context, tx *sql.Tx, pace *usage.Pacer, p *rowset, mu sync.Locker, batchID [16]byte) (int, error) {
	chunks := p.userChunks(mu, chunkMaxRaw)
	if err := u.insertChunks(ctx, tx, pace, todayChunks, batchID, chunks); err != nil {
		return 0, err
	}
	return len(chunks), nil
}

// chunkTable is a table of per-user chunks: today's, with each chunk's
// batch and level, or the finished days' sealed ones (userfold.go).
type chunkTable struct {
	usage.InsertTable
	sealed bool
}

var (
	todayChunks  = chunkTable{InsertTable: usage.InsertTable{Name: "usage_user_chunks", Cols: "day, app_id, part, batch_id, seq, level, entries, body"}}
	sealedChunks = chunkTable{InsertTable: usage.InsertTable{Name: "usage_user_sealed", Cols: "day, app_id, part, seq, entries, body"}, sealed: true}
)

// insertChunks writes chunks into table, a batch (batchID: not written to
// the sealed table).
func (u *userFigures) insertChunks(ctx context.Context, tx *sql.Tx, pace *usage.Pacer, table chunkTable, batchID [16]byte, chunks []userChunk) error {
	return usage.InsertRows(ctx, tx, pace, u.met.statements, u.perStatement, table.InsertTable, len(chunks),
		func(i int) int { return len(chunks[i].body) },
		func(args []any, i int) []any {
			c := &chunks[i]
			if table.sealed {
				return append(args, c.day.String(), c.app, c.part, c.seq, c.entries, c.body)
			}
			return append(args, c.day.String(), c.app, c.part, batchID[:], c.seq, c.level, c.entries, c.body)
		})
}

// userDayStatement is stored's statement and its arguments: the rows of
// usage_user_daily, then the chunks of each chunk table that may hold user.
func userDayStatement(app, user string, day Day) (string, []any) {
	d := day.String()
	q := "SELECT interface_id, calls, allowed, denied, NULL FROM usage_user_daily WHERE app_id = ? AND user_id = ? AND day = ?"
	args := []any{app, user, d}
	parts := partsOf(user)
	in := strings.TrimSuffix(strings.Repeat("?, ", len(parts)), ", ")
	for _, t := range []chunkTable{todayChunks, sealedChunks} {
		q += "\nUNION ALL\nSELECT '', 0, 0, 0, body FROM " + t.Name + " WHERE day = ? AND app_id = ? AND part IN (" + in + ")"
		args = append(args, d, app)
		for _, p := range parts {
			args = append(args, p)
		}
	}
	return q, args
}

// stored adds user's stored figures for day to ifaces: its entries in the
// day's chunks and sealed chunks, and its usage_user_daily rows (written by
// versions before the seal). One statement, so one snapshot: a seal that
// commits meanwhile moves entries between the chunk tables.
func (u *userFigures) stored(ctx context.Context, db *sql.DB, app, user string, day Day, ifaces map[string]*Counts) error {
	q, args := userDayStatement(app, user, day)
	err := usage.EachRow(ctx, db, q, args, func(rows *sql.Rows) error {
		var iface string
		var c Counts
		var body []byte
		if err := rows.Scan(&iface, &c.Calls, &c.Allowed, &c.Denied, &body); err != nil {
			return err
		}
		if body == nil {
			usage.AddTo(ifaces, iface, c)
			return nil
		}
		return eachUserEntry(body, func(u, f string, c Counts) {
			if u == user {
				usage.AddTo(ifaces, f, c)
			}
		})
	})
	if err != nil {
		return fmt.Errorf("per-user figures of %q on %s: %w", app, day, err)
	}
	return nil
}
