// Package userdays stores analytics' per-user figures: one entry per
// (app, user, interface, UTC day) with its calls, allowed and denied,
// kept in MySQL as compressed chunks (chunk.go) that the flush writes,
// the rollup merges and seals (fold.go, merge.go), and a user's stats
// query reads (Stored).
package userdays

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quota-platform/quota/analytics/usage"
)

// Store keeps the per-user figures as compressed chunks per (day, app)
// (chunk.go): a flush writes a batch of chunks (Write), the rollup merges
// the day's batches (Merge, fold.go) and seals them once it is over
// (Seal); Stored reads one user's.
type Store struct {
	perStatement int                    // rows per INSERT (analytics' Options.RowsPerStatement)
	duty         float64                // the pace of merges and seals (Options.FlushDuty)
	rowsWritten  *prometheus.CounterVec // chunk rows committed, by table
	statements   *prometheus.CounterVec // INSERT statements sent, by table
}

// NewStore is a Store writing perStatement rows an INSERT, merging and
// sealing at duty (usage.Pacer), counting in rowsWritten and statements
// (by table).
func NewStore(perStatement int, duty float64, rowsWritten, statements *prometheus.CounterVec) *Store {
	return &Store{perStatement: perStatement, duty: duty, rowsWritten: rowsWritten, statements: statements}
}

// The tables of the chunks: today's and the finished days' sealed ones.
const (
	ChunksTable = "usage_user_chunks"
	SealedTable = "usage_user_sealed"
)

// Write writes the user rows of groups as one batch of chunks in tx,
// sort readying each group's rows first (the flush sorts them under its
// lock: readers range over them), and returns the chunks written.
//
// Chunks, not a row per (app, user, interface, day): over 8 minutes of make bench's load MariaDB spent 0.79 µs an entry (+0.60 merge, +0.61 seal) against 19.1 µs an upserted row, and 17 bytes an entry on disk against 128 (make bench-userdays-layout).
func (u *Store) Write(ctx context.Context, tx *sql.Tx, pace *usage.Pacer, groups []*Group, sort func(*Group), batchID [16]byte) (int, error) {
	chunks := Chunks(groups, sort, chunkMaxRaw)
	if err := u.insertChunks(ctx, tx, pace, todayChunks, batchID, chunks); err != nil {
		return 0, err
	}
	return len(chunks), nil
}

// chunkTable is a table of per-user chunks: today's, with each chunk's
// batch and level, or the finished days' sealed ones (fold.go).
type chunkTable struct {
	usage.InsertTable
	sealed bool
}

var (
	todayChunks  = chunkTable{InsertTable: usage.InsertTable{Name: ChunksTable, Cols: "day, app_id, part, batch_id, seq, level, entries, body"}}
	sealedChunks = chunkTable{InsertTable: usage.InsertTable{Name: SealedTable, Cols: "day, app_id, part, seq, entries, body"}, sealed: true}
)

// insertChunks writes chunks into table, a batch (batchID: not written to
// the sealed table).
func (u *Store) insertChunks(ctx context.Context, tx *sql.Tx, pace *usage.Pacer, table chunkTable, batchID [16]byte, chunks []userChunk) error {
	return usage.InsertRows(ctx, tx, pace, u.statements, u.perStatement, table.InsertTable, len(chunks),
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
func userDayStatement(app, user string, day usage.Day) (string, []any) {
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

// Stored adds user's stored figures for day to ifaces: its entries in the
// day's chunks and sealed chunks, and its usage_user_daily rows (written by
// versions before the seal). One statement, so one snapshot: a seal that
// commits meanwhile moves entries between the chunk tables.
func (u *Store) Stored(ctx context.Context, db *sql.DB, app, user string, day usage.Day, ifaces map[string]*usage.Counts) error {
	q, args := userDayStatement(app, user, day)
	err := usage.EachRow(ctx, db, q, args, func(rows *sql.Rows) error {
		var iface string
		var c usage.Counts
		var body []byte
		if err := rows.Scan(&iface, &c.Calls, &c.Allowed, &c.Denied, &body); err != nil {
			return err
		}
		if body == nil {
			usage.AddTo(ifaces, iface, c)
			return nil
		}
		return EachEntry(body, func(u, f string, c usage.Counts) {
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
