package tiers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/quota-platform/quota/rules"
)

// ColdStore keeps fixed-window cells in MySQL/MariaDB, one row per cell,
// sharded over N databases (sql/003_cold_cells.sql):
//
//	cold_cells(k BINARY(16) PRIMARY KEY, r VARBINARY(40))
//	k = CellID, r = the raw record of warmrecord.go (7-10 bytes)
//
// A cell's shard is JumpShard(ShardKey, N). A check is, per shard it
// touches, one short transaction: SELECT ... FOR UPDATE of its rows, then
// (when it counts) one multi-row INSERT ... ON DUPLICATE KEY UPDATE of the
// locked rows, then COMMIT. A cell's first call reserves its row first
// (INSERT IGNORE of an empty record, outside the transaction), so checks
// only ever lock existing rows: no gap locks, no insert deadlocks.
// Shards are locked in ascending order, so two checks never wait on each
// other in a cycle across shards. Every shard is decided before any
// commits; if a commit fails after others succeeded, those are refunded
// (evaluate, commit, compensate). A deadlock retries the whole op. Dry
// runs read without locks. Only placeholders reach the SQL text.
//
// DSNs should set interpolateParams=true: the IN lists vary in length, so
// server-side prepared statements would cost a round trip per statement.
type ColdStore struct {
	dbs         []*sql.DB
	maxAttempts int
	// beforeCommit, when set (tests), runs before the commit of each shard
	// of a counting check (i counts the shards committed so far); an error
	// fails that commit.
	beforeCommit func(shard, i int) error
}

// ColdOptions configures a ColdStore.
type ColdOptions struct {
	MaxAttempts int // tries per check on deadlocks and insert races; 0: 10
}

// coldTable is the table of cold cells.
const coldTable = "cold_cells"

// coldChunk bounds the rows of one statement of Export, Import and Delete.
const coldChunk = 500

// NewColdStore returns a cold store over the shard databases, in shard order.
func NewColdStore(dbs []*sql.DB, o ColdOptions) *ColdStore {
	a := o.MaxAttempts
	if a <= 0 {
		a = 10
	}
	return &ColdStore{dbs: dbs, maxAttempts: a}
}

// Tier returns Cold.
func (s *ColdStore) Tier() Tier { return Cold }

// Shards is the number of shard databases.
func (s *ColdStore) Shards() int { return len(s.dbs) }

// ShardOf returns the shard of a cell.
func (s *ColdStore) ShardOf(r *Ref) int {
	return JumpShard(cellShardKey(r.ShardKey, r.Identity), len(s.dbs))
}

// Ping reports whether every shard answers.
func (s *ColdStore) Ping(ctx context.Context) error {
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
	if errors.Is(err, ErrUnavailable) {
		if errors.Is(err, ErrColdUnavailable) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrColdUnavailable, err)
	}
	return fmt.Errorf("%w: %w: %w", ErrUnavailable, ErrColdUnavailable, err)
}

// coldRetryable reports errors after which the whole op is tried again:
// a duplicate key (another check created a row this one found missing), a
// deadlock, or InnoDB's "record has changed".
func coldRetryable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1062 || me.Number == 1213 || me.Number == 1020)
}

// coldCell is one cell of an op: its id and shard.
type coldCell struct {
	id    CellID
	shard int
}

// Check decides ops in order, each as if sent alone, all or nothing per op.
func (s *ColdStore) Check(ctx context.Context, now time.Time, ops []*Op) error {
	for _, op := range ops {
		if err := s.checkOp(ctx, now, op); err != nil {
			return err
		}
	}
	return nil
}

func (s *ColdStore) plan(op *Op) ([]coldCell, []int, error) {
	for i := range op.Cells {
		if _, err := fixedWindowSeconds(&op.Cells[i]); err != nil {
			return nil, nil, fmt.Errorf("cold check: %w", err)
		}
	}
	if len(s.dbs) == 0 {
		return nil, nil, errors.New("cold check: no shard databases")
	}
	cells := make([]coldCell, len(op.Cells))
	var shards []int
	for i := range op.Cells {
		c := &op.Cells[i]
		ref := RefOf(c)
		cells[i] = coldCell{id: ref.ID(), shard: s.ShardOf(&ref)}
		if !slices.Contains(shards, cells[i].shard) {
			shards = append(shards, cells[i].shard)
		}
	}
	slices.Sort(shards)
	return cells, shards, nil
}

// coldRow is one row as read (exists, raw) and its record as the op
// leaves it (state). A row with an empty r is reserved: it holds no record
// yet (see tryOp).
type coldRow struct {
	exists bool
	raw    []byte
	state  recState
}

// errColdReserved asks for another attempt after rows were reserved.
var errColdReserved = errors.New("cold rows reserved")

func (s *ColdStore) checkOp(ctx context.Context, now time.Time, op *Op) error {
	cells, shards, err := s.plan(op)
	if err != nil {
		return err
	}
	if op.Mode == DryRun {
		rows := map[CellID]*coldRow{}
		for _, sh := range shards {
			if err := selectCold(ctx, s.dbs[sh], idsOfShard(cells, sh), false, rows); err != nil {
				return fmt.Errorf("cold check shard %d: %w", sh, err)
			}
		}
		_, err := decideCold(op, now, cells, rows)
		return err
	}
	for attempt := 1; ; attempt++ {
		err := s.tryOp(ctx, now, op, cells, shards)
		if retry, err := s.again(ctx, err, attempt); !retry {
			return err
		}
	}
}

// again reports whether an attempt that ended with err is to be tried
// again: after reserving rows at once, after a deadlock or an insert race
// with a backoff, unless attempts are used up; otherwise it returns the
// error to give up with.
func (s *ColdStore) again(ctx context.Context, err error, attempt int) (bool, error) {
	reserved := errors.Is(err, errColdReserved)
	if err == nil || !(reserved || coldRetryable(err)) {
		return false, err
	}
	if attempt >= s.maxAttempts {
		return false, fmt.Errorf("cold: %w (%d attempts): %w", ErrContention, attempt, err)
	}
	if !reserved {
		if err := tierBackoff(ctx, attempt); err != nil {
			return false, fmt.Errorf("cold: %w", err)
		}
	}
	return true, nil
}

func idsOfShard(cells []coldCell, shard int) []CellID {
	var ids []CellID
	for _, c := range cells {
		if c.shard == shard && !slices.Contains(ids, c.id) {
			ids = append(ids, c.id)
		}
	}
	return ids
}

func decideCold(op *Op, now time.Time, cells []coldCell, rows map[CellID]*coldRow) (bool, error) {
	var stBuf [8]*recState
	st := stBuf[:0]
	for _, c := range cells {
		r, ok := rows[c.id]
		if !ok {
			r = &coldRow{}
			rows[c.id] = r
		}
		st = append(st, &r.state)
	}
	return decideFixed(op, now, st, Cold)
}

// tryOp is one attempt at a counting op: lock, decide, write, commit.
func (s *ColdStore) tryOp(ctx context.Context, now time.Time, op *Op, cells []coldCell, shards []int) (err error) {
	txs := make([]*sql.Tx, len(shards))
	committed := 0
	defer func() {
		for _, tx := range txs[committed:] {
			if tx != nil {
				_ = tx.Rollback()
			}
		}
	}()
	rows := map[CellID]*coldRow{}
	for i, sh := range shards {
		tx, err := s.dbs[sh].BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("cold check shard %d: begin: %w", sh, coldUnavailable(err))
		}
		txs[i] = tx
		if err := selectCold(ctx, tx, idsOfShard(cells, sh), true, rows); err != nil {
			return fmt.Errorf("cold check shard %d: %w", sh, err)
		}
	}
	changed, err := decideCold(op, now, cells, rows)
	if err != nil || !changed {
		return err
	}
	// A cell without a row has nothing to lock: under REPEATABLE READ its
	// SELECT ... FOR UPDATE took a gap lock, and concurrent first calls
	// inserting into one gap deadlock each other. So a first call reserves
	// the missing rows (an empty r) outside any transaction, then starts
	// over: checks then lock existing rows only, in key order, shard by
	// shard. (A reservation racing a check can still deadlock, rarely;
	// InnoDB picks a victim and that op is tried again.)
	var missing bool
	for _, c := range cells {
		missing = missing || !rows[c.id].exists
	}
	if missing {
		for i := range txs {
			_ = txs[i].Rollback()
		}
		for _, sh := range shards {
			var ids []CellID
			for _, id := range idsOfShard(cells, sh) {
				if !rows[id].exists {
					ids = append(ids, id)
				}
			}
			if _, err := reserveCold(ctx, s.dbs[sh], ids, nil); err != nil {
				return fmt.Errorf("cold check shard %d: %w", sh, err)
			}
		}
		return errColdReserved
	}
	for i, sh := range shards {
		if err := writeCold(ctx, txs[i], idsOfShard(cells, sh), rows); err != nil {
			return fmt.Errorf("cold check shard %d: %w", sh, err)
		}
	}
	for i, sh := range shards {
		var cerr error
		if s.beforeCommit != nil {
			cerr = s.beforeCommit(sh, i)
		}
		if cerr == nil {
			cerr = txs[i].Commit()
		}
		// This shard is finished either way (a failed COMMIT may or may
		// not have committed); the ones after it are rolled back now.
		committed = i + 1
		if cerr != nil {
			// Rolling back releases the locks of this shard when its
			// commit never ran; after a failed COMMIT it is a no-op.
			for _, tx := range txs[i:] {
				_ = tx.Rollback()
			}
			committed = len(txs)
			// Not retried: %v keeps a MySQL error from looking retryable.
			cerr = fmt.Errorf("cold check shard %d: commit: %w: %w: %v", sh, ErrUnavailable, ErrColdUnavailable, cerr)
			if i > 0 {
				cerr = errors.Join(cerr, s.compensate(ctx, now, op, cells, shards[:i]))
			}
			return cerr
		}
	}
	return nil
}

// compensate gives back what op counted in the given, committed shards
// after a later shard's commit failed.
func (s *ColdStore) compensate(ctx context.Context, now time.Time, op *Op, cells []coldCell, shards []int) error {
	ctx = context.WithoutCancel(ctx)
	refund := &Op{Cost: op.Cost, Mode: Refund}
	for i, c := range cells {
		if slices.Contains(shards, c.shard) {
			refund.Cells = append(refund.Cells, op.Cells[i])
		}
	}
	if err := s.checkOp(ctx, now, refund); err != nil {
		return fmt.Errorf("cold compensation of shards %v failed, their counts are %d too high: %w", shards, op.Cost, err)
	}
	return nil
}

// coldQueryer is a *sql.DB or a *sql.Tx.
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

// selectCold reads the rows of ids into rows (FOR UPDATE when lock).
func selectCold(ctx context.Context, q coldQueryer, ids []CellID, lock bool, rows map[CellID]*coldRow) error {
	if len(ids) == 0 {
		return nil
	}
	args := make([]any, len(ids))
	for i := range ids {
		args[i] = ids[i][:]
	}
	query := "SELECT k, r FROM " + coldTable + " WHERE k IN (" + coldPlaceholders(len(ids), 1) + ")"
	if lock {
		query += " FOR UPDATE"
	}
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
		var id CellID
		if len(k) != len(id) {
			return fmt.Errorf("cold row key of %d bytes", len(k))
		}
		copy(id[:], k)
		row := &coldRow{exists: true, raw: r}
		if len(r) > 0 {
			rec, err := parseRecordRaw(r)
			if err != nil {
				return fmt.Errorf("cold row %x: %w", k, err)
			}
			row.state = recState{rec: rec, present: true}
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
func writeCold(ctx context.Context, q coldQueryer, ids []CellID, rows map[CellID]*coldRow) error {
	var ins, upd []any
	for _, id := range ids {
		r := rows[id]
		if !r.state.present {
			continue
		}
		raw, err := appendRecordRaw(nil, &r.state.rec)
		if err != nil {
			return err
		}
		switch {
		case !r.exists:
			ins = append(ins, id[:], raw)
		case string(r.raw) != string(raw):
			upd = append(upd, id[:], raw)
		}
	}
	if len(ins) > 0 {
		q1 := "INSERT INTO " + coldTable + " (k, r) VALUES " + coldPlaceholders(len(ins)/2, 2)
		if _, err := q.ExecContext(ctx, q1, ins...); err != nil {
			return coldUnavailable(err)
		}
	}
	if len(upd) > 0 {
		q2 := "INSERT INTO " + coldTable + " (k, r) VALUES " + coldPlaceholders(len(upd)/2, 2) +
			" ON DUPLICATE KEY UPDATE r = VALUES(r)"
		if _, err := q.ExecContext(ctx, q2, upd...); err != nil {
			return coldUnavailable(err)
		}
	}
	return nil
}

// reserveCold creates the rows of ids that have none (autocommit), each
// with its value in vals, or empty (reserved, no record) when vals is nil.
// It returns how many it created.
func reserveCold(ctx context.Context, q coldQueryer, ids []CellID, vals [][]byte) (int64, error) {
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
func (s *ColdStore) refsByShard(refs []Ref) ([][]int, error) {
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

// Export returns the records of refs (Mover): one SELECT per shard and
// chunk of refs.
func (s *ColdStore) Export(ctx context.Context, refs []Ref) ([]Record, error) {
	rows := map[CellID]*coldRow{}
	ids := make([]CellID, len(refs))
	for i := range refs {
		ids[i] = refs[i].ID()
	}
	by, err := s.refsByShard(refs)
	if err != nil {
		return nil, err
	}
	for sh, idx := range by {
		for chunk := range slices.Chunk(idx, coldChunk) {
			var part []CellID
			for _, i := range chunk {
				part = append(part, ids[i])
			}
			if err := selectCold(ctx, s.dbs[sh], part, false, rows); err != nil {
				return nil, fmt.Errorf("cold export shard %d: %w", sh, err)
			}
		}
	}
	var out []Record
	for i := range refs {
		if r, ok := rows[ids[i]]; ok && r.state.present {
			rec := r.state.rec
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
func (s *ColdStore) Import(ctx context.Context, recs []Record) error {
	newest := map[CellID]int{}
	var refs []Ref
	var pick []*Record
	for i := range recs {
		r := &recs[i]
		if _, err := fixedWindowSeconds(&Cell{Algorithm: rules.FixedWindow, Window: r.Window}); err != nil {
			return fmt.Errorf("cold import: %w", err)
		}
		if _, err := appendRecordRaw(nil, r); err != nil {
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
		refs = append(refs, r.Ref)
	}
	by, err := s.refsByShard(refs)
	if err != nil {
		return err
	}
	for sh, idx := range by {
		for chunk := range slices.Chunk(idx, coldChunk) {
			part := make([]*Record, len(chunk))
			for j, i := range chunk {
				part[j] = pick[i]
			}
			if err := s.importChunk(ctx, sh, part); err != nil {
				return fmt.Errorf("cold import shard %d: %w", sh, err)
			}
		}
	}
	return nil
}

func (s *ColdStore) importChunk(ctx context.Context, sh int, recs []*Record) error {
	for attempt := 1; ; attempt++ {
		err := s.tryImport(ctx, sh, recs)
		if retry, err := s.again(ctx, err, attempt); !retry {
			return err
		}
	}
}

// tryImport imports one chunk in one transaction on existing rows. Rows
// that are missing are created outside it first by INSERT IGNORE with their
// record (no gap locks, as in tryOp), then the chunk is tried again: a row
// that a check created meanwhile is then compared like any other.
func (s *ColdStore) tryImport(ctx context.Context, sh int, recs []*Record) error {
	tx, err := s.dbs[sh].BeginTx(ctx, nil)
	if err != nil {
		return coldUnavailable(err)
	}
	defer func() { _ = tx.Rollback() }()
	ids := make([]CellID, len(recs))
	for i, r := range recs {
		ids[i] = r.ID()
	}
	rows := map[CellID]*coldRow{}
	if err := selectCold(ctx, tx, ids, true, rows); err != nil {
		return err
	}
	var missing, write []CellID
	var vals [][]byte
	for i, r := range recs {
		cur, ok := rows[ids[i]]
		if !ok {
			raw, err := appendRecordRaw(nil, r)
			if err != nil {
				return err
			}
			missing = append(missing, ids[i])
			vals = append(vals, raw)
			continue
		}
		if cur.state.present && !r.NewerThan(&cur.state.rec) {
			continue
		}
		cur.state = recState{rec: *r, present: true}
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

// Delete removes the records of refs (Mover): one DELETE per shard and chunk.
func (s *ColdStore) Delete(ctx context.Context, refs []Ref) error {
	by, err := s.refsByShard(refs)
	if err != nil {
		return err
	}
	for sh, idx := range by {
		for chunk := range slices.Chunk(idx, coldChunk) {
			args := make([]any, len(chunk))
			for j, i := range chunk {
				id := refs[i].ID()
				args[j] = id[:]
			}
			q := "DELETE FROM " + coldTable + " WHERE k IN (" + coldPlaceholders(len(chunk), 1) + ")"
			if _, err := s.dbs[sh].ExecContext(ctx, q, args...); err != nil {
				return fmt.Errorf("cold delete shard %d: %w", sh, coldUnavailable(err))
			}
		}
	}
	return nil
}
