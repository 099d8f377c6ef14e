package usage

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// InsertTable is a table that multi-row INSERTs write: its columns in
// INSERT order, and what follows the values (an ON DUPLICATE KEY clause).
type InsertTable struct {
	Name, Cols, Suffix string
}

// maxStatementBytes bounds what size says of one INSERT's rows: below
// MySQL's default max_allowed_packet (16 MiB).
const maxStatementBytes = 4 << 20

// InsertRows writes n rows into t in statements of at most per rows (and,
// with size, of at most maxStatementBytes, or one row), row appending the
// values of row i, resting after each statement as pace says and counting
// it in statements (by table). Each
// statement's shape is prepared once a transaction, so values (chunk
// bodies) go as binary parameters, not escaped into the text for MariaDB
// to unescape (BenchmarkFlushServerCPU).
func InsertRows(ctx context.Context, tx *sql.Tx, pace *Pacer, statements *prometheus.CounterVec, per int, t InsertTable, n int,
	size func(i int) int, row func(args []any, i int) []any) error {
	ncols := strings.Count(t.Cols, ",") + 1
	stmts := map[int]*sql.Stmt{}
	defer func() {
		for _, s := range stmts {
			s.Close()
		}
	}()
	args := make([]any, 0, ncols*min(n, per))
	for lo := 0; lo < n; {
		hi, bytes := lo, 0
		args = args[:0]
		for hi < n && hi-lo < per {
			if size != nil {
				b := size(hi)
				if hi > lo && bytes+b > maxStatementBytes {
					break
				}
				bytes += b
			}
			args = row(args, hi)
			hi++
		}
		statements.WithLabelValues(t.Name).Inc()
		stmt := stmts[hi-lo]
		if stmt == nil {
			var err error
			if stmt, err = tx.PrepareContext(ctx, valuesSQL(t, ncols, hi-lo)); err != nil {
				return fmt.Errorf("%s: %w", t.Name, err)
			}
			stmts[hi-lo] = stmt
		}
		if _, err := stmt.ExecContext(ctx, args...); err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
		pace.Rest(ctx)
		lo = hi
	}
	return nil
}

// valuesSQL is "INSERT INTO name (cols) VALUES (?,…),… suffix" for rows
// rows of ncols placeholders.
func valuesSQL(t InsertTable, ncols, rows int) string {
	tuple := "(" + strings.TrimSuffix(strings.Repeat("?,", ncols), ",") + ")"
	values := strings.TrimSuffix(strings.Repeat(tuple+",", rows), ",")
	return "INSERT INTO " + t.Name + " (" + t.Cols + ") VALUES " + values + t.Suffix
}
