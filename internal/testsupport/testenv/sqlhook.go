package testenv

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// StatementHook runs before each round trip a hooked pool makes to
// MariaDB, with its text: a statement's, or START TRANSACTION, COMMIT and
// ROLLBACK for a *sql.Tx's. An error fails that round trip without sending
// it, as a lost connection would (a failed COMMIT rolls back).
type StatementHook func(query string) error

// Hooked returns a pool on db's database whose connections run hook
// before each round trip: a test makes a chosen one fail, counts them, or
// makes something happen just before one (another session's write), from
// outside the code under test. The pool is closed when the test ends.
func Hooked(t testing.TB, db *sql.DB, hook StatementHook) *sql.DB {
	t.Helper()
	var name string
	if err := db.QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	base, err := mysql.NewConnector(MySQLConfig(t, name))
	if err != nil {
		t.Fatal(err)
	}
	hooked := sql.OpenDB(hookedConnector{Connector: base, hook: hook})
	hooked.SetMaxOpenConns(40)
	hooked.SetMaxIdleConns(40)
	t.Cleanup(func() { hooked.Close() })
	return hooked
}

// hookedConnector makes connections that run hook before each round trip.
type hookedConnector struct {
	driver.Connector
	hook StatementHook
}

func (c hookedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &hookedConn{conn: conn, hook: c.hook}, nil
}

// hookedConn passes everything to the driver's connection, and has each
// of the optional interfaces go-sql-driver/mysql's has, so that
// database/sql uses it as it would the driver's own (client-side
// interpolation, not a prepared statement, for a statement with args).
type hookedConn struct {
	conn driver.Conn
	hook StatementHook
}

func (c *hookedConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *hookedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if err := c.hook(query); err != nil {
		return nil, err
	}
	return c.conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

func (c *hookedConn) Close() error { return c.conn.Close() }

func (c *hookedConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *hookedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if err := c.hook("START TRANSACTION"); err != nil {
		return nil, err
	}
	tx, err := c.conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return hookedTx{tx: tx, hook: c.hook}, nil
}

func (c *hookedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if err := c.hook(query); err != nil {
		return nil, err
	}
	return c.conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c *hookedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if err := c.hook(query); err != nil {
		return nil, err
	}
	return c.conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (c *hookedConn) Ping(ctx context.Context) error { return c.conn.(driver.Pinger).Ping(ctx) }

func (c *hookedConn) ResetSession(ctx context.Context) error {
	return c.conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *hookedConn) IsValid() bool { return c.conn.(driver.Validator).IsValid() }

func (c *hookedConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

// hookedTx runs the hook before a transaction's COMMIT and ROLLBACK.
type hookedTx struct {
	tx   driver.Tx
	hook StatementHook
}

func (t hookedTx) Commit() error {
	if err := t.hook("COMMIT"); err != nil {
		_ = t.tx.Rollback()
		return err
	}
	return t.tx.Commit()
}

func (t hookedTx) Rollback() error {
	if err := t.hook("ROLLBACK"); err != nil {
		_ = t.tx.Rollback()
		return err
	}
	return t.tx.Rollback()
}
