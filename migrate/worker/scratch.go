package worker

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/warm"
)

// scratchTables are CompactColdFilters' temporary tables, one a shard, on
// connections of their own (a temporary table lives as long as its
// connection): the cells it keeps, by tag, for reading back in tag order.
// MariaDB sorts them, so that a compaction holds one tag's cells at a time
// however large cell_activity is.
type scratchTables []*sql.Conn

const scratchTable = `CREATE TEMPORARY TABLE compact_cells (
	tag BINARY(3) NOT NULL,
	cell BINARY(6) NOT NULL,
	PRIMARY KEY (tag, cell)
) ENGINE=InnoDB`

// openScratch opens a connection a shard and creates its scratch table.
// The tables it made are returned with an error too: close them.
func (w *Worker) openScratch(ctx context.Context) (scratchTables, error) {
	out := make(scratchTables, 0, len(w.DBs))
	for sh, db := range w.DBs {
		conn, err := db.Conn(ctx)
		if err != nil {
			return out, fmt.Errorf("compact cold filters, shard %d: %w", sh, err)
		}
		out = append(out, conn)
		if _, err := conn.ExecContext(ctx, scratchTable); err != nil {
			return out, fmt.Errorf("compact cold filters, shard %d: scratch table: %w", sh, err)
		}
	}
	return out, nil
}

// close drops the tables and gives their connections back.
func (s scratchTables) close() {
	for _, c := range s {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = c.ExecContext(ctx, "DROP TEMPORARY TABLE IF EXISTS compact_cells")
		cancel()
		c.Close()
	}
}

// insertScratch writes cells' (tag, filter cell) to conn's scratch table.
func insertScratch(ctx context.Context, conn *sql.Conn, refs []tiers.Ref) error {
	if len(refs) == 0 {
		return nil
	}
	args := make([]any, 0, 2*len(refs))
	for _, r := range refs {
		c := warm.FilterCellOf(r.ID())
		args = append(args, r.Tag[:], c[:])
	}
	q := "INSERT IGNORE INTO compact_cells (tag, cell) VALUES " +
		strings.TrimSuffix(strings.Repeat("(?, ?), ", len(refs)), ", ")
	_, err := conn.ExecContext(ctx, q, args...)
	return err
}

// scratchReader reads every shard's scratch table in tag order at once
// and hands out the cells of one tag at a time (of), tags asked for in
// increasing order.
type scratchReader struct {
	rows  []*sql.Rows
	next  []scratchRow // each shard's row read ahead
	first error
}

type scratchRow struct {
	tag  tiers.Tag
	cell warm.FilterCell
	ok   bool // false: the shard has no row left
}

// byTag starts reading the scratch tables in tag order.
func (s scratchTables) byTag(ctx context.Context) (*scratchReader, error) {
	r := &scratchReader{next: make([]scratchRow, len(s))}
	for sh, c := range s {
		rows, err := c.QueryContext(ctx, "SELECT tag, cell FROM compact_cells ORDER BY tag, cell")
		if err != nil {
			r.close()
			return nil, fmt.Errorf("compact cold filters, shard %d: %w", sh, err)
		}
		r.rows = append(r.rows, rows)
		r.advance(sh)
	}
	return r, r.err()
}

// advance reads shard sh's next row.
func (r *scratchReader) advance(sh int) {
	rows := r.rows[sh]
	r.next[sh] = scratchRow{}
	if !rows.Next() {
		r.keep(rows.Err())
		return
	}
	var tag, cell []byte
	if err := rows.Scan(&tag, &cell); err != nil {
		r.keep(err)
		return
	}
	if len(tag) != len(tiers.Tag{}) || len(cell) != len(warm.FilterCell{}) {
		r.keep(fmt.Errorf("scratch row of %d and %d bytes", len(tag), len(cell)))
		return
	}
	r.next[sh] = scratchRow{tag: tiers.Tag(tag), cell: warm.FilterCell(cell), ok: true}
}

// of returns the cells of tag in every shard's table, skipping the rows
// of tags before it.
func (r *scratchReader) of(tag tiers.Tag) ([]warm.FilterCell, error) {
	var out []warm.FilterCell
	for sh := range r.next {
		for r.next[sh].ok {
			c := bytes.Compare(r.next[sh].tag[:], tag[:])
			if c > 0 {
				break
			}
			if c == 0 {
				out = append(out, r.next[sh].cell)
			}
			r.advance(sh)
		}
	}
	return out, r.err()
}

func (r *scratchReader) keep(err error) {
	if r.first == nil && err != nil {
		r.first = fmt.Errorf("compact cold filters: scratch table: %w", err)
	}
}

func (r *scratchReader) err() error { return r.first }

func (r *scratchReader) close() {
	for _, rows := range r.rows {
		rows.Close()
	}
}
