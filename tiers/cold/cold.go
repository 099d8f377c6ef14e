// Package cold is the cold tier: fixed-window cells as rows of sharded
// MySQL/MariaDB databases (Store), and what a move does to its rows
// (Freeze, Exists, Size, and tiers.Mover's Export, Import and Delete;
// warm.ColdSide drives them with the directory's steps).
package cold

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
)

// Store keeps fixed-window cells in MySQL/MariaDB, one row per cell,
// sharded over N databases (sql/003_cold_cells.sql):
//
//	cold_cells(k BINARY(16) PRIMARY KEY, r VARBINARY(40))
//	k = CellID, r = the raw record of tiers/warmrecord.go (7-10 bytes)
//
// A cell's shard is JumpShard(ShardKey, N). One Check call is decided as a
// group (group commit, cold_group.go): per shard its ops touch, one short
// transaction for all of them: one SELECT ... FOR UPDATE of their rows in
// key order, then each op decided in turn on those rows as if sent alone
// (all or nothing per op), then one multi-row INSERT ... ON DUPLICATE KEY
// UPDATE of the rows that changed, then one COMMIT (one fsync); two round
// trips in all, as BEGIN and COMMIT ride with the statements next to them
// (shardTx, cold_tx.go). The router
// hands it the cold parts of a whole coalesced batch, so N concurrent
// checks on a shard cost one transaction, not N. A cell's first call
// reserves its row first (INSERT IGNORE of an empty record, outside the
// transaction), so checks only ever lock existing rows: no gap locks, no
// insert deadlocks. Shards are locked in ascending order, so two checks
// never wait on each other in a cycle across shards. Every shard is decided
// before any commits; if a commit fails after others succeeded, the ops
// with a part in a shard that did not commit fail and what they counted in
// the others is refunded (evaluate, commit, compensate). A deadlock retries
// the whole group. Dry runs alone read without locks. Only placeholders
// reach the SQL text.
//
// Shard DSNs must set interpolateParams=true and multiStatements=true
// (ShardDSN adds both).
type Store struct {
	dbs         []*sql.DB
	maxAttempts int
}

// Options configures a Store.
type Options struct {
	MaxAttempts int // tries per check on deadlocks and insert races; 0: 10
}

// coldTable is the table of cold cells.
const coldTable = "cold_cells"

// coldChunk bounds the rows of one statement of Export, Import and Delete.
const coldChunk = 500

// NewStore returns a cold store over the shard databases, in shard order.
func NewStore(dbs []*sql.DB, o Options) *Store {
	a := o.MaxAttempts
	if a <= 0 {
		a = 10
	}
	return &Store{dbs: dbs, maxAttempts: a}
}

// Tier returns Cold.
func (s *Store) Tier() tiers.Tier { return tiers.Cold }

// ShardOf returns the shard of a cell.
func (s *Store) ShardOf(r *tiers.Ref) int {
	return tiers.JumpShard(tiers.CellShardKey(r.ShardKey, r.Identity), len(s.dbs))
}

// Ping reports whether every shard answers.
func (s *Store) Ping(ctx context.Context) error {
	for i, db := range s.dbs {
		if err := db.PingContext(ctx); err != nil {
			return fmt.Errorf("cold shard %d: %w", i, coldUnavailable(err))
		}
	}
	return nil
}

// coldUnavailable marks errors that mean a shard could not answer (network,
// timeouts, a dead connection) as ErrUnavailable; MySQL's error replies stay
// plain errors.
func coldUnavailable(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return err
	}
	if errors.Is(err, tiers.ErrUnavailable) {
		if errors.Is(err, tiers.ErrColdUnavailable) {
			return err
		}
		return fmt.Errorf("%w: %w", tiers.ErrColdUnavailable, err)
	}
	return fmt.Errorf("%w: %w: %w", tiers.ErrUnavailable, tiers.ErrColdUnavailable, err)
}

// coldRetryable reports errors after which the whole op is tried again:
// a duplicate key (another check created a row this one found missing), a
// deadlock, or InnoDB's "record has changed".
func coldRetryable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1062 || me.Number == 1213 || me.Number == 1020)
}

// coldRow is one row as read (exists, raw) and its record as the ops
// leave it (state). A row with an empty r is reserved: it holds no record
// yet (see tryGroup). bad is why its record could not be parsed: the ops
// on the row fail with it.
type coldRow struct {
	exists bool
	raw    []byte
	state  tiers.RecState
	bad    error
}

// errColdReserved asks for another attempt after rows were reserved.
var errColdReserved = errors.New("cold rows reserved")

// again reports whether an attempt that ended with err is to be tried
// again: after reserving rows at once, after a deadlock or an insert race
// with a backoff, unless attempts are used up; otherwise it returns the
// error to give up with.
func (s *Store) again(ctx context.Context, err error, attempt int) (bool, error) {
	reserved := errors.Is(err, errColdReserved)
	if err == nil || !(reserved || coldRetryable(err)) {
		return false, err
	}
	if attempt >= s.maxAttempts {
		return false, fmt.Errorf("cold: %w (%d attempts): %w", tiers.ErrContention, attempt, err)
	}
	if !reserved {
		if err := tiers.Backoff(ctx, attempt); err != nil {
			return false, fmt.Errorf("cold: %w", err)
		}
	}
	return true, nil
}

// coldQueryer is a *sql.DB, *sql.Tx or *sql.Conn.
type coldQueryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// coldPlaceholders returns "(?, ?), (?, ?), ..." style lists: n groups of size k.
func coldPlaceholders(n, k int) string {
	group := "(" + strings.Repeat("?, ", k-1) + "?)"
	if k == 1 {
		group = "?"
	}
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(group)
	}
	return b.String()
}

// selectCold reads the rows of ids into rows (FOR UPDATE when lock); a
// row whose record cannot be parsed fails it.
func selectCold(ctx context.Context, q coldQueryer, ids []tiers.CellID, lock bool, rows map[tiers.CellID]*coldRow) error {
	if err := readCold(ctx, q, ids, lock, rows); err != nil {
		return err
	}
	for _, id := range ids {
		if r, ok := rows[id]; ok && r.bad != nil {
			return r.bad
		}
	}
	return nil
}

// readCold reads the rows of ids into rows (FOR UPDATE when lock); a row
// whose record cannot be parsed is kept with its error in bad.
func readCold(ctx context.Context, q coldQueryer, ids []tiers.CellID, lock bool, rows map[tiers.CellID]*coldRow) error {
	if len(ids) == 0 {
		return nil
	}
	return queryCold(ctx, q, coldSelectSQL(len(ids), lock), coldIDArgs(ids), rows)
}

// coldSelectSQL is the SELECT of n rows by key.
func coldSelectSQL(n int, lock bool) string {
	query := "SELECT k, r FROM " + coldTable + " WHERE k IN (" + coldPlaceholders(n, 1) + ")"
	if lock {
		query += " FOR UPDATE"
	}
	return query
}

// coldIDArgs is ids as statement arguments.
func coldIDArgs(ids []tiers.CellID) []any {
	args := make([]any, len(ids))
	for i := range ids {
		args[i] = ids[i][:]
	}
	return args
}

// queryCold runs query, whose result is (k, r) rows, and keeps them in rows.
func queryCold(ctx context.Context, q coldQueryer, query string, args []any, rows map[tiers.CellID]*coldRow) error {
	rs, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return coldUnavailable(err)
	}
	defer rs.Close()
	for rs.Next() {
		var k, r []byte
		if err := rs.Scan(&k, &r); err != nil {
			return coldUnavailable(err)
		}
		var id tiers.CellID
		if len(k) != len(id) {
			return fmt.Errorf("cold row key of %d bytes", len(k))
		}
		copy(id[:], k)
		row := &coldRow{exists: true, raw: r}
		if len(r) > 0 {
			rec, err := tiers.ParseRecordRaw(r)
			if err != nil {
				row.bad = fmt.Errorf("cold row %x: %w", k, err)
			} else {
				row.state = tiers.RecState{Rec: rec, Present: true}
			}
		}
		rows[id] = row
	}
	if err := rs.Err(); err != nil {
		return coldUnavailable(err)
	}
	return nil
}

// writeCold writes the records of ids that changed: new rows by a plain
// INSERT (a row created meanwhile makes it fail with a duplicate key, and
// the caller retries), existing ones - locked by this transaction - by an
// INSERT ... ON DUPLICATE KEY UPDATE.
func writeCold(ctx context.Context, q coldQueryer, ids []tiers.CellID, rows map[tiers.CellID]*coldRow) error {
	stmts, args, err := coldWrites(ids, rows)
	if err != nil {
		return err
	}
	for i, st := range stmts {
		if _, err := q.ExecContext(ctx, st, args[i]...); err != nil {
			return coldUnavailable(err)
		}
	}
	return nil
}

// coldWrites returns writeCold's statements (none, one or two) and the
// arguments of each.
func coldWrites(ids []tiers.CellID, rows map[tiers.CellID]*coldRow) ([]string, [][]any, error) {
	var ins, upd []any
	for _, id := range ids {
		r := rows[id]
		if r == nil || !r.state.Present {
			continue
		}
		raw, err := tiers.AppendRecordRaw(nil, &r.state.Rec)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case !r.exists:
			ins = append(ins, id[:], raw)
		case string(r.raw) != string(raw):
			upd = append(upd, id[:], raw)
		}
	}
	var stmts []string
	var args [][]any
	if len(ins) > 0 {
		stmts = append(stmts, "INSERT INTO "+coldTable+" (k, r) VALUES "+coldPlaceholders(len(ins)/2, 2))
		args = append(args, ins)
	}
	if len(upd) > 0 {
		stmts = append(stmts, "INSERT INTO "+coldTable+" (k, r) VALUES "+coldPlaceholders(len(upd)/2, 2)+
			" ON DUPLICATE KEY UPDATE r = VALUES(r)")
		args = append(args, upd)
	}
	return stmts, args, nil
}

// reserveCold creates the rows of ids that have none (autocommit), each
// with its value in vals, or empty (reserved, no record) when vals is nil.
// It returns how many it created.
func reserveCold(ctx context.Context, q coldQueryer, ids []tiers.CellID, vals [][]byte) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	args := make([]any, 0, 2*len(ids))
	for i, id := range ids {
		v := []byte{}
		if vals != nil {
			v = vals[i]
		}
		args = append(args, id[:], v)
	}
	qs := "INSERT IGNORE INTO " + coldTable + " (k, r) VALUES " + coldPlaceholders(len(ids), 2)
	res, err := q.ExecContext(ctx, qs, args...)
	if err != nil {
		return 0, coldUnavailable(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, coldUnavailable(err)
	}
	return n, nil
}

// refsByShard groups indexes of refs by shard, in shard order.
func (s *Store) refsByShard(refs []tiers.Ref) ([][]int, error) {
	if len(s.dbs) == 0 && len(refs) > 0 {
		return nil, errors.New("cold: no shard databases")
	}
	by := make([][]int, len(s.dbs))
	for i := range refs {
		sh := s.ShardOf(&refs[i])
		by[sh] = append(by[sh], i)
	}
	return by, nil
}

// shardChunks calls fn with the indexes of refs grouped by shard, in
// chunks of at most coldChunk (one statement each), shard by shard.
func (s *Store) shardChunks(refs []tiers.Ref, fn func(sh int, chunk []int) error) error {
	by, err := s.refsByShard(refs)
	if err != nil {
		return err
	}
	for sh, idx := range by {
		for chunk := range slices.Chunk(idx, coldChunk) {
			if err := fn(sh, chunk); err != nil {
				return err
			}
		}
	}
	return nil
}

// Export returns the records of refs (Mover): one SELECT per shard and
// chunk of refs.
func (s *Store) Export(ctx context.Context, refs []tiers.Ref) ([]tiers.Record, error) {
	rows := map[tiers.CellID]*coldRow{}
	ids := make([]tiers.CellID, len(refs))
	for i := range refs {
		ids[i] = refs[i].ID()
	}
	err := s.shardChunks(refs, func(sh int, chunk []int) error {
		part := make([]tiers.CellID, len(chunk))
		for j, i := range chunk {
			part[j] = ids[i]
		}
		if err := selectCold(ctx, s.dbs[sh], part, false, rows); err != nil {
			return fmt.Errorf("cold export shard %d: %w", sh, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []tiers.Record
	for i := range refs {
		if r, ok := rows[ids[i]]; ok && r.state.Present {
			rec := r.state.Rec
			rec.Ref = refs[i]
			out = append(out, rec)
		}
	}
	return out, nil
}

// Import writes recs where no newer record is held (Mover): per shard and
// chunk, one transaction that locks the rows, then one multi-row INSERT
// and one multi-row upsert. Of several records for one cell, the newest is
// imported.
func (s *Store) Import(ctx context.Context, recs []tiers.Record) error {
	newest := map[tiers.CellID]int{}
	var refs []tiers.Ref
	var pick []*tiers.Record
	var ids []tiers.CellID // of pick
	for i := range recs {
		r := &recs[i]
		if _, err := tiers.FixedWindowSeconds(&tiers.Cell{Algorithm: rules.FixedWindow, Window: r.Window}); err != nil {
			return fmt.Errorf("cold import: %w", err)
		}
		if _, err := tiers.AppendRecordRaw(nil, r); err != nil {
			return fmt.Errorf("cold import: %w", err)
		}
		id := r.ID()
		if j, dup := newest[id]; dup {
			if r.NewerThan(pick[j]) {
				pick[j] = r
			}
			continue
		}
		newest[id] = len(pick)
		pick = append(pick, r)
		ids = append(ids, id)
		refs = append(refs, r.Ref)
	}
	return s.shardChunks(refs, func(sh int, chunk []int) error {
		part := make([]*tiers.Record, len(chunk))
		partIDs := make([]tiers.CellID, len(chunk))
		for j, i := range chunk {
			part[j], partIDs[j] = pick[i], ids[i]
		}
		if err := s.importChunk(ctx, sh, part, partIDs); err != nil {
			return fmt.Errorf("cold import shard %d: %w", sh, err)
		}
		return nil
	})
}

// importChunk first inserts the chunk's records where the cells have no
// row (INSERT IGNORE, no locks): a move into cold mostly makes new rows,
// and when every row is new that one statement is the import. Otherwise
// the rows it did not insert existed and are compared in tryImport, which
// finds the rows just inserted holding their own record (nothing newer to
// write). ids are the records' cell ids.
func (s *Store) importChunk(ctx context.Context, sh int, recs []*tiers.Record, ids []tiers.CellID) error {
	vals := make([][]byte, len(recs))
	for i, r := range recs {
		raw, err := tiers.AppendRecordRaw(nil, r)
		if err != nil {
			return err
		}
		vals[i] = raw
	}
	if n, err := reserveCold(ctx, s.dbs[sh], ids, vals); err == nil && n == int64(len(recs)) {
		return nil
	}
	for attempt := 1; ; attempt++ {
		err := s.tryImport(ctx, sh, recs, ids)
		if retry, err := s.again(ctx, err, attempt); !retry {
			return err
		}
	}
}

// tryImport imports one chunk in one transaction on existing rows. Rows
// that are missing are created outside it first by INSERT IGNORE with their
// record (no gap locks, as in tryOp), then the chunk is tried again: a row
// that a check created meanwhile is then compared like any other.
func (s *Store) tryImport(ctx context.Context, sh int, recs []*tiers.Record, ids []tiers.CellID) error {
	tx, err := s.dbs[sh].BeginTx(ctx, nil)
	if err != nil {
		return coldUnavailable(err)
	}
	defer func() { _ = tx.Rollback() }()
	rows := map[tiers.CellID]*coldRow{}
	if err := selectCold(ctx, tx, ids, true, rows); err != nil {
		return err
	}
	var missing, write []tiers.CellID
	var vals [][]byte
	for i, r := range recs {
		cur, ok := rows[ids[i]]
		if !ok {
			raw, err := tiers.AppendRecordRaw(nil, r)
			if err != nil {
				return err
			}
			missing = append(missing, ids[i])
			vals = append(vals, raw)
			continue
		}
		if cur.state.Present && !r.NewerThan(&cur.state.Rec) {
			continue
		}
		cur.state = tiers.RecState{Rec: *r, Present: true}
		write = append(write, ids[i])
	}
	if len(missing) > 0 {
		_ = tx.Rollback()
		n, err := reserveCold(ctx, s.dbs[sh], missing, vals)
		if err != nil {
			return err
		}
		if n == int64(len(missing)) && len(write) == 0 {
			return nil // every record went into a row of its own making
		}
		return errColdReserved
	}
	if len(write) == 0 {
		return nil
	}
	if err := writeCold(ctx, tx, write, rows); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return coldUnavailable(err)
	}
	return nil
}

// InsertNew writes each record where its cell has no row, and leaves the
// rows that exist as they are: one INSERT IGNORE per shard and chunk. The
// quiet move of idle cells (HotMover.QuietRecords) uses it; a row that
// exists is another move's copy, or the cell's.
func (s *Store) InsertNew(ctx context.Context, recs []tiers.Record) error {
	return s.eachChunk(recs, func(sh int, ids []tiers.CellID, vals [][]byte) error {
		if _, err := reserveCold(ctx, s.dbs[sh], ids, vals); err != nil {
			return fmt.Errorf("cold insert shard %d: %w", sh, err)
		}
		return nil
	})
}

// DeleteUnchanged deletes the row of each record that still holds exactly
// that record: a row nothing has counted in since InsertNew wrote it (a
// check that counts changes its Last or Count). One DELETE per shard and
// chunk.
func (s *Store) DeleteUnchanged(ctx context.Context, recs []tiers.Record) error {
	return s.eachChunk(recs, func(sh int, ids []tiers.CellID, vals [][]byte) error {
		args := make([]any, 0, 2*len(ids))
		for i := range ids {
			args = append(args, ids[i][:], vals[i])
		}
		q := "DELETE FROM " + coldTable + " WHERE (k, r) IN (" + coldPlaceholders(len(ids), 2) + ")"
		if _, err := s.dbs[sh].ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("cold delete shard %d: %w", sh, coldUnavailable(err))
		}
		return nil
	})
}

// eachChunk calls fn with the cell ids and raw records of recs, grouped
// by shard, in chunks of coldChunk.
func (s *Store) eachChunk(recs []tiers.Record, fn func(sh int, ids []tiers.CellID, vals [][]byte) error) error {
	refs := make([]tiers.Ref, len(recs))
	for i := range recs {
		refs[i] = recs[i].Ref
	}
	return s.shardChunks(refs, func(sh int, chunk []int) error {
		ids := make([]tiers.CellID, len(chunk))
		vals := make([][]byte, len(chunk))
		for j, i := range chunk {
			raw, err := tiers.AppendRecordRaw(nil, &recs[i])
			if err != nil {
				return fmt.Errorf("cold record: %w", err)
			}
			ids[j], vals[j] = recs[i].ID(), raw
		}
		return fn(sh, ids, vals)
	})
}

// Delete removes the records of refs (Mover): one DELETE per shard and chunk.
func (s *Store) Delete(ctx context.Context, refs []tiers.Ref) error {
	return s.shardChunks(refs, func(sh int, chunk []int) error {
		args := make([]any, len(chunk))
		for j, i := range chunk {
			id := refs[i].ID()
			args[j] = id[:]
		}
		q := "DELETE FROM " + coldTable + " WHERE k IN (" + coldPlaceholders(len(chunk), 1) + ")"
		if _, err := s.dbs[sh].ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("cold delete shard %d: %w", sh, coldUnavailable(err))
		}
		return nil
	})
}
