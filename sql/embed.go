// Package sqlschema holds the MySQL/MariaDB schema of quota (cold tier, analytics)
// as numbered migration files embedded in the binary, and applies them.
//
// Rules for the .sql files in this folder:
//
//   - Name: NNN_name.sql — NNN is the decimal version (unique, zero-padded so
//     that names sort in order), name is lower-case [a-z0-9_]. Files are applied
//     in ascending version order, each exactly once per database; what was
//     applied is recorded in the table schema_migrations.
//   - A file, once released, is never edited: change the schema with a new file.
//   - A file may hold several statements. A statement ends with a ';' that is
//     the last character of its line (trailing blanks allowed); the last
//     statement may omit it. The splitter is deliberately simple: a statement
//     must contain no other ';' at a line end (no semicolon ending a line
//     inside a string literal, comment, procedure or trigger body).
//   - Whole-line comments (starting with "--" or "#") and blank lines are
//     dropped before splitting.
//   - MySQL commits DDL implicitly, so a file that fails half-way is not rolled
//     back and is not recorded: write statements that can run again
//     (CREATE TABLE IF NOT EXISTS, ...) so that a re-run after a fix converges.
package sqlschema

import (
	"context"
	"crypto/md5"
	"database/sql"
	"database/sql/driver"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

//go:embed *.sql
var files embed.FS

// lockTimeout is how long Apply waits for another caller migrating the same
// database (seconds, as GET_LOCK takes it).
const lockTimeout = 30

var fileName = regexp.MustCompile(`^([0-9]+)_([a-z0-9_]+)\.sql$`)

type migration struct {
	version int
	name    string // file name, e.g. "001_cold_counters.sql"
}

// migrations lists the migration files at the root of fsys, sorted by version.
// A .sql file with a malformed name or a duplicate version is an error.
func migrations(fsys fs.FS) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	var ms []migration
	seen := map[int]string{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("schema %s: file name is not NNN_name.sql", e.Name())
		}
		v, err := strconv.Atoi(m[1])
		if err != nil || v > 1<<31-1 {
			return nil, fmt.Errorf("schema %s: version %q out of range", e.Name(), m[1])
		}
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("schema %s: version %d already used by %s", e.Name(), v, other)
		}
		seen[v] = e.Name()
		ms = append(ms, migration{version: v, name: e.Name()})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	return ms, nil
}

// Files lists the embedded migration files in the order Apply applies them.
func Files() []string {
	ms, err := migrations(files)
	if err != nil {
		// The embedded set is fixed at build time and checked by the tests.
		panic(err)
	}
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.name
	}
	return names
}

// splitStatements splits a migration file into statements (see the package
// comment for the rules).
func splitStatements(text string) []string {
	var stmts []string
	var cur strings.Builder
	flush := func() {
		if s := strings.TrimSpace(cur.String()); s != "" {
			stmts = append(stmts, s)
		}
		cur.Reset()
	}
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if strings.HasSuffix(trimmed, ";") {
			cur.WriteString(strings.TrimSuffix(strings.TrimRight(line, " \t\r"), ";"))
			flush()
			continue
		}
		cur.WriteString(strings.TrimRight(line, "\r"))
		cur.WriteByte('\n')
	}
	flush()
	return stmts
}

// Apply applies, in version order, every embedded migration file not yet
// recorded in schema_migrations of db's database, recording each, and returns
// the names of the files it applied (none when the schema is up to date).
// Concurrent callers on the same database are serialised by a named lock, so
// each file is applied once. On error it returns the files applied before it.
func Apply(ctx context.Context, db *sql.DB) ([]string, error) {
	return applyFS(ctx, db, files)
}

func applyFS(ctx context.Context, db *sql.DB, fsys fs.FS) (applied []string, err error) {
	ms, err := migrations(fsys)
	if err != nil {
		return nil, err
	}

	// GET_LOCK belongs to a session: every statement runs on this one connection.
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("schema: connect: %w", err)
	}
	defer conn.Close()

	dbName, err := selectedDatabase(ctx, conn)
	if err != nil {
		return nil, err
	}
	lock := lockName(dbName)

	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", lock, lockTimeout).Scan(&got); err != nil {
		return nil, fmt.Errorf("schema: lock %s: %w", lock, err)
	}
	if got.Int64 != 1 {
		return nil, fmt.Errorf("schema: lock %s: not obtained within %d s (another migration running?)", lock, lockTimeout)
	}
	defer func() {
		// Release even when ctx is done; if that fails, drop the session
		// (the server then frees the lock) rather than pool a connection that
		// still holds it.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, rerr := conn.ExecContext(rctx, "DO RELEASE_LOCK(?)", lock); rerr != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()

	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
  version INT NOT NULL PRIMARY KEY,
  name VARCHAR(255) NOT NULL,
  applied_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP
) ENGINE=InnoDB`); err != nil {
		return nil, fmt.Errorf("schema: create schema_migrations: %w", err)
	}

	done, err := appliedVersions(ctx, conn)
	if err != nil {
		return nil, err
	}

	applied = []string{}
	for _, m := range ms {
		if done[m.version] {
			continue
		}
		text, err := fs.ReadFile(fsys, m.name)
		if err != nil {
			return applied, fmt.Errorf("schema %s: %w", m.name, err)
		}
		for _, stmt := range splitStatements(string(text)) {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return applied, fmt.Errorf("schema %s: %w", m.name, err)
			}
		}
		if _, err := conn.ExecContext(ctx,
			"INSERT INTO schema_migrations (version, name) VALUES (?, ?)", m.version, m.name); err != nil {
			return applied, fmt.Errorf("schema %s: record: %w", m.name, err)
		}
		applied = append(applied, m.name)
	}
	return applied, nil
}

// querier is what appliedVersions and selectedDatabase read through: a
// pool or one session.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// selectedDatabase is the database the connection's DSN names; none is an
// error, since every table lives in it.
func selectedDatabase(ctx context.Context, q querier) (string, error) {
	var name sql.NullString
	if err := q.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&name); err != nil {
		return "", fmt.Errorf("schema: %w", err)
	}
	if !name.Valid || name.String == "" {
		return "", errors.New("schema: no database selected (the DSN must name one)")
	}
	return name.String, nil
}

// appliedVersions are the versions recorded in schema_migrations.
func appliedVersions(ctx context.Context, q querier) (map[int]bool, error) {
	rows, err := q.QueryContext(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("schema: read schema_migrations: %w", err)
	}
	defer rows.Close()
	done := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("schema: read schema_migrations: %w", err)
		}
		done[v] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("schema: read schema_migrations: %w", err)
	}
	return done, nil
}

// Pending lists the embedded migration files that Apply would apply to
// db's database: those not recorded in its schema_migrations (all of them
// when it has no such table). It changes nothing and takes no lock, so
// quotad serve can ask it at start-up without DDL privileges.
func Pending(ctx context.Context, db *sql.DB) ([]string, error) {
	return pendingFS(ctx, db, files)
}

func pendingFS(ctx context.Context, db *sql.DB, fsys fs.FS) ([]string, error) {
	ms, err := migrations(fsys)
	if err != nil {
		return nil, err
	}
	if _, err := selectedDatabase(ctx, db); err != nil {
		return nil, err
	}
	var tables int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.TABLES
  WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'schema_migrations'`).Scan(&tables); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	done := map[int]bool{}
	if tables > 0 {
		if done, err = appliedVersions(ctx, db); err != nil {
			return nil, err
		}
	}
	pending := []string{}
	for _, m := range ms {
		if !done[m.version] {
			pending = append(pending, m.name)
		}
	}
	return pending, nil
}

// lockName is the GET_LOCK name for one database: locks are server-wide, and
// shards sharing a server migrate independently. MySQL caps names at 64 chars.
func lockName(db string) string {
	name := "quota_schema:" + db
	if len(name) > 64 {
		sum := md5.Sum([]byte(db))
		name = "quota_schema:" + hex.EncodeToString(sum[:])
	}
	return name
}
