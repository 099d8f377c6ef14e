package cold

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/quota-platform/quota/tiers"
)

// shardTx is one shard's transaction in a counting cold check, sent in two
// round trips instead of four: "START TRANSACTION; SELECT ... FOR UPDATE",
// then "INSERT ... ON DUPLICATE KEY UPDATE ...; COMMIT" (or a ROLLBACK).
// Locks and isolation are those of a *sql.Tx; only BEGIN and COMMIT ride
// along with the statements next to them. That takes multiStatements=true
// on the shard's DSN (ShardDSN).
//
// database/sql does not know that a transaction is open on the pinned
// connection, so end() closes it on every way out: a ROLLBACK, and when
// that fails too, the connection is discarded rather than handed back to
// the pool with a transaction (and its locks) possibly still open.
type shardTx struct {
	conn *sql.Conn
	open bool // a transaction may be open on conn
}

// beginShardTx pins a connection of db; lock starts the transaction.
func beginShardTx(ctx context.Context, db *sql.DB) (*shardTx, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, coldUnavailable(err)
	}
	return &shardTx{conn: conn}, nil
}

// lock starts the transaction and reads the rows of ids (ascending) FOR
// UPDATE into rows, in statements of at most coldChunk ids, so locks are
// taken in key order; the first statement carries the START TRANSACTION.
func (t *shardTx) lock(ctx context.Context, ids []tiers.CellID, rows map[tiers.CellID]*coldRow) error {
	for part := range slices.Chunk(ids, coldChunk) {
		query := coldSelectSQL(len(part), true)
		if !t.open {
			t.open = true // from here on, whatever happens, end() rolls back
			query = "START TRANSACTION; " + query
		}
		if err := queryCold(ctx, t.conn, query, coldIDArgs(part), rows); err != nil {
			return multiStatementsHint(err)
		}
	}
	return nil
}

// commitSQL is the text and arguments of a shard's second round trip: the
// writes of the rows of ids that changed, then COMMIT.
func commitSQL(ids []tiers.CellID, rows map[tiers.CellID]*coldRow) (string, []any, error) {
	var b strings.Builder
	var args []any
	for part := range slices.Chunk(ids, coldChunk) {
		stmts, sargs, err := coldWrites(part, rows)
		if err != nil {
			return "", nil, err
		}
		for i, st := range stmts {
			b.WriteString(st)
			b.WriteString("; ")
			args = append(args, sargs[i]...)
		}
	}
	b.WriteString("COMMIT")
	return b.String(), args, nil
}

// commit sends commitSQL's text in one round trip. An error means nothing
// of this shard was committed (or, when the connection died on the COMMIT,
// that it cannot be known; as with a *sql.Tx, the caller treats it as not
// committed).
func (t *shardTx) commit(ctx context.Context, query string, args []any) error {
	if _, err := t.conn.ExecContext(ctx, query, args...); err != nil {
		return coldUnavailable(err)
	}
	t.open = false
	return nil
}

// shardTxEndTimeout bounds end()'s ROLLBACK, which runs even when the
// check's context is done.
const shardTxEndTimeout = 5 * time.Second

// end rolls back what is still open and hands the connection back to the
// pool (or discards it when the ROLLBACK failed). It may be called more
// than once, and on nil.
func (t *shardTx) end(ctx context.Context) {
	if t == nil || t.conn == nil {
		return
	}
	if t.open {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shardTxEndTimeout)
		_, err := t.conn.ExecContext(rctx, "ROLLBACK")
		cancel()
		if err != nil {
			_ = t.conn.Raw(func(any) error { return driver.ErrBadConn }) // closes it
		}
		t.open = false
	}
	_ = t.conn.Close()
	t.conn = nil
}

// multiStatementsHint adds to MySQL's syntax error what most likely caused
// it: a shard DSN without multiStatements=true.
func multiStatementsHint(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1064 {
		return fmt.Errorf("%w (does the shard's DSN set multiStatements=true? see cold.ShardDSN)", err)
	}
	return err
}

// ShardDSN returns dsn with the driver options the cold tier needs:
// multiStatements=true, for shardTx, and interpolateParams=true, because a
// multi-statement text cannot be a server-side prepared statement (and
// without it every statement with arguments is a prepare, an execute and a
// close: three round trips instead of one). A DSN that turns either off,
// or names no database (every table is in the shard's database), is an
// error.
func ShardDSN(dsn string) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", err
	}
	if cfg.DBName == "" {
		return "", errors.New("names no database: end the DSN with the shard's, e.g. …@tcp(127.0.0.1:3306)/quota_0")
	}
	for _, opt := range []string{"multiStatements", "interpolateParams"} {
		if strings.Contains(dsn, opt+"=false") || strings.Contains(dsn, opt+"=0") {
			return "", fmt.Errorf("%s is off: the cold tier sends a transaction's statements together, with their arguments, and needs %s=true", opt, opt)
		}
	}
	cfg.MultiStatements = true
	cfg.InterpolateParams = true
	return cfg.FormatDSN(), nil
}
