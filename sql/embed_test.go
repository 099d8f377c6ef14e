package sqlschema

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/go-sql-driver/mysql"
)

// The database tests run against a real MariaDB/MySQL (CI always has one):
// QUOTA_TEST_MYSQL_DSN_BASE, default quota:quota@tcp(127.0.0.1:3306)/, names a
// user that may create and drop databases matching quota_t_%. Each test
// creates its own database quota_t_<random hex> and drops it when done.
const defaultDSNBase = "quota:quota@tcp(127.0.0.1:3306)/"

func dsnBase(t *testing.T) *mysql.Config {
	t.Helper()
	base := os.Getenv("QUOTA_TEST_MYSQL_DSN_BASE")
	if base == "" {
		base = defaultDSNBase
	}
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatalf("QUOTA_TEST_MYSQL_DSN_BASE %q: %v", base, err)
	}
	cfg.MultiStatements = false
	cfg.ParseTime = true
	cfg.Timeout = 5 * time.Second
	return cfg
}

func openDSN(t *testing.T, cfg *mysql.Config) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// serverDB connects without selecting a database, failing (not skipping) the
// test when the server is unreachable.
func serverDB(t *testing.T) *sql.DB {
	t.Helper()
	cfg := dsnBase(t)
	cfg.DBName = ""
	db := openDSN(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("cannot connect to MariaDB as %s@%s (%v): run deploy/ensure-services.sh (or set QUOTA_TEST_MYSQL_DSN_BASE)",
			cfg.User, cfg.Addr, err)
	}
	return db
}

// freshDB creates an empty database quota_t_<random hex>, dropped at cleanup,
// and returns a pool on it.
func freshDB(t *testing.T) (*sql.DB, string) {
	t.Helper()
	server := serverDB(t)
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	name := "quota_t_" + hex.EncodeToString(b)
	if _, err := server.Exec("CREATE DATABASE `" + name + "` CHARACTER SET utf8mb4"); err != nil {
		t.Fatalf("create database %s: %v (run deploy/ensure-services.sh to grant quota%% databases)", name, err)
	}
	t.Cleanup(func() {
		if _, err := server.Exec("DROP DATABASE IF EXISTS `" + name + "`"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	cfg := dsnBase(t)
	cfg.DBName = name
	return openDSN(t, cfg), name
}

func recorded(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query("SELECT name FROM schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	names := []string{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

func countRows(t *testing.T, db *sql.DB, query string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func TestSplitStatements(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"empty", "", nil},
		{"only comments", "-- a\n# b\n\n  -- c\n", nil},
		{"one", "SELECT 1;\n", []string{"SELECT 1"}},
		{"no final semicolon", "SELECT 1", []string{"SELECT 1"}},
		{"two on lines", "SELECT 1;\nSELECT 2;\n", []string{"SELECT 1", "SELECT 2"}},
		{"multi-line with comments",
			"-- head\nCREATE TABLE t (\n  a INT, -- inline\n  b INT\n);  \r\n\n-- tail\nINSERT INTO t VALUES (1, 2);",
			[]string{"CREATE TABLE t (\n  a INT, -- inline\n  b INT\n)", "INSERT INTO t VALUES (1, 2)"}},
		{"semicolon mid-line stays", "INSERT INTO t VALUES ('a;b');\n", []string{"INSERT INTO t VALUES ('a;b')"}},
		{"blank statement", ";\nSELECT 1;", []string{"SELECT 1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := splitStatements(tc.in); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("splitStatements(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestMigrations(t *testing.T) {
	file := &fstest.MapFile{Data: []byte("SELECT 1;\n")}
	tests := []struct {
		name    string
		fsys    fstest.MapFS
		want    []string
		wantErr string
	}{
		{"numeric order, non-sql ignored",
			fstest.MapFS{"10_b.sql": file, "002_a.sql": file, "README.md": file, "sub/003_x.sql": file},
			[]string{"002_a.sql", "10_b.sql"}, ""},
		{"empty", fstest.MapFS{}, nil, ""},
		{"bad name", fstest.MapFS{"001-init.sql": file}, nil, "schema 001-init.sql: file name is not NNN_name.sql"},
		{"upper case", fstest.MapFS{"001_Init.sql": file}, nil, "schema 001_Init.sql"},
		{"duplicate version", fstest.MapFS{"001_a.sql": file, "1_b.sql": file}, nil, "version 1 already used"},
		{"version too large", fstest.MapFS{"99999999999_a.sql": file}, nil, "out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ms, err := migrations(tc.fsys)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, m := range ms {
				names = append(names, m.name)
			}
			if !reflect.DeepEqual(names, tc.want) {
				t.Errorf("got %q, want %q", names, tc.want)
			}
		})
	}
}

func TestFiles(t *testing.T) {
	got := Files() // panics if an embedded name is malformed
	if len(got) == 0 || got[0] != "001_cold_counters.sql" {
		t.Fatalf("Files() = %q, want it to start with 001_cold_counters.sql", got)
	}
	for _, name := range got {
		text, err := files.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if len(splitStatements(string(text))) == 0 {
			t.Errorf("%s has no statement", name)
		}
	}
}

func TestLockName(t *testing.T) {
	if got := lockName("quota_0"); got != "quota_schema:quota_0" {
		t.Errorf("lockName(quota_0) = %q", got)
	}
	long := strings.Repeat("x", 64)
	if got := lockName(long); len(got) > 64 || got == lockName(long+"y") {
		t.Errorf("lockName(64 x) = %q: want at most 64 chars, distinct per database", got)
	}
}

func TestApplyEmbedded(t *testing.T) {
	t.Parallel()
	db, name := freshDB(t)
	ctx := context.Background()

	applied, err := Apply(ctx, db)
	if err != nil {
		t.Fatalf("first Apply: %v", err)
	}
	if !reflect.DeepEqual(applied, Files()) {
		t.Fatalf("first Apply applied %q, want %q", applied, Files())
	}
	if got := recorded(t, db); !reflect.DeepEqual(got, Files()) {
		t.Fatalf("schema_migrations = %q, want %q", got, Files())
	}
	// The tables of 001 exist and take rows.
	if _, err := db.Exec("INSERT INTO cold_counters (k, win, cnt) VALUES (UNHEX(MD5('x')), 493000, 1)"); err != nil {
		t.Fatalf("cold_counters: %v", err)
	}

	for i := range 2 {
		applied, err = Apply(ctx, db)
		if err != nil {
			t.Fatalf("Apply #%d: %v", i+2, err)
		}
		if len(applied) != 0 {
			t.Fatalf("Apply #%d applied %q, want nothing", i+2, applied)
		}
	}
	if got := recorded(t, db); !reflect.DeepEqual(got, Files()) {
		t.Fatalf("schema_migrations after re-runs = %q, want %q", got, Files())
	}
	if n := countRows(t, db, "SELECT COUNT(*) FROM cold_counters"); n != 1 {
		t.Fatalf("cold_counters has %d rows after re-runs, want 1", n)
	}
	// The named lock was released.
	var free int
	if err := db.QueryRow("SELECT IS_FREE_LOCK(?)", lockName(name)).Scan(&free); err != nil || free != 1 {
		t.Fatalf("IS_FREE_LOCK(%s) = %d, %v; want 1", lockName(name), free, err)
	}
}

// countingFS has n files; each creates the table runs (if needed) and adds a
// row with its version, so a file applied twice shows as a duplicate row.
func countingFS(n int) fstest.MapFS {
	fsys := fstest.MapFS{}
	for v := 1; v <= n; v++ {
		fsys[fmt.Sprintf("%03d_step.sql", v)] = &fstest.MapFile{Data: []byte(fmt.Sprintf(
			"-- step %d\nCREATE TABLE IF NOT EXISTS runs (v INT NOT NULL) ENGINE=InnoDB;\nINSERT INTO runs (v) VALUES (%d);\n", v, v))}
	}
	return fsys
}

func TestApplyConcurrent(t *testing.T) {
	t.Parallel()
	const callers = 4
	tests := []struct {
		name  string
		fsys  fstest.MapFS // nil: the embedded files
		files int
		runs  bool // check the runs table of countingFS
	}{
		{"embedded", nil, len(Files()), false},
		{"five counting files", countingFS(5), 5, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, _ := freshDB(t)
			db.SetMaxOpenConns(2 * callers)
			var (
				wg    sync.WaitGroup
				mu    sync.Mutex
				total int
				errs  []error
				start = make(chan struct{})
			)
			for range callers {
				wg.Go(func() {
					<-start
					var applied []string
					var err error
					if tc.fsys == nil {
						applied, err = Apply(context.Background(), db)
					} else {
						applied, err = applyFS(context.Background(), db, tc.fsys)
					}
					mu.Lock()
					defer mu.Unlock()
					total += len(applied)
					if err != nil {
						errs = append(errs, err)
					}
				})
			}
			close(start)
			wg.Wait()
			if len(errs) > 0 {
				t.Fatalf("concurrent Apply errors: %v", errs)
			}
			if total != tc.files {
				t.Errorf("callers applied %d files in total, want %d", total, tc.files)
			}
			if n := countRows(t, db, "SELECT COUNT(*) FROM schema_migrations"); n != tc.files {
				t.Errorf("schema_migrations has %d rows, want %d", n, tc.files)
			}
			if tc.runs {
				if n := countRows(t, db, "SELECT COUNT(*) FROM runs"); n != tc.files {
					t.Errorf("runs has %d rows, want %d (a file ran twice or not at all)", n, tc.files)
				}
				if n := countRows(t, db, "SELECT COUNT(DISTINCT v) FROM runs"); n != tc.files {
					t.Errorf("runs has %d distinct versions, want %d", n, tc.files)
				}
			}
		})
	}
}

func TestApplyBrokenFile(t *testing.T) {
	t.Parallel()
	db, _ := freshDB(t)
	ctx := context.Background()
	ok := &fstest.MapFile{Data: []byte("CREATE TABLE IF NOT EXISTS one (a INT);\n")}
	after := &fstest.MapFile{Data: []byte("CREATE TABLE IF NOT EXISTS three (a INT);\n")}
	broken := fstest.MapFS{
		"001_ok.sql":    ok,
		"002_bad.sql":   {Data: []byte("CREATE TABLE IF NOT EXISTS two (a INT);\nCREATE TABLEX nope (a INT);\n")},
		"003_after.sql": after,
	}

	applied, err := applyFS(ctx, db, broken)
	if err == nil {
		t.Fatal("Apply with a bad statement succeeded")
	}
	if !strings.HasPrefix(err.Error(), "schema 002_bad.sql: ") {
		t.Errorf("error %q does not name the file as \"schema 002_bad.sql: …\"", err)
	}
	var myErr *mysql.MySQLError
	if !errors.As(err, &myErr) || myErr.Number != 1064 {
		t.Errorf("error %v does not wrap the server's syntax error (1064)", err)
	}
	if want := []string{"001_ok.sql"}; !reflect.DeepEqual(applied, want) {
		t.Errorf("applied %q, want %q", applied, want)
	}
	if got, want := recorded(t, db), []string{"001_ok.sql"}; !reflect.DeepEqual(got, want) {
		t.Errorf("schema_migrations = %q, want %q (the bad file must not be recorded)", got, want)
	}

	// After the file is fixed, a re-run applies it and what follows.
	fixed := fstest.MapFS{
		"001_ok.sql":    ok,
		"002_bad.sql":   {Data: []byte("CREATE TABLE IF NOT EXISTS two (a INT);\nCREATE TABLE IF NOT EXISTS two_b (a INT);\n")},
		"003_after.sql": after,
	}
	applied, err = applyFS(ctx, db, fixed)
	if err != nil {
		t.Fatalf("Apply after fix: %v", err)
	}
	if want := []string{"002_bad.sql", "003_after.sql"}; !reflect.DeepEqual(applied, want) {
		t.Errorf("after fix applied %q, want %q", applied, want)
	}
	if got, want := recorded(t, db), []string{"001_ok.sql", "002_bad.sql", "003_after.sql"}; !reflect.DeepEqual(got, want) {
		t.Errorf("schema_migrations after fix = %q, want %q", got, want)
	}
}

func TestApplyNoDatabase(t *testing.T) {
	t.Parallel()
	_, err := Apply(context.Background(), serverDB(t))
	if err == nil || !strings.Contains(err.Error(), "no database selected") {
		t.Fatalf("Apply without a database: err = %v, want \"no database selected\"", err)
	}
}

func TestPending_ListsWhatApplyWouldApplyAndChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("embedded files on an empty database, then none", func(t *testing.T) {
		t.Parallel()
		db, _ := freshDB(t)
		got, err := Pending(ctx, db)
		if err != nil || !reflect.DeepEqual(got, Files()) {
			t.Fatalf("Pending on an empty database = %q, %v; want %q", got, err, Files())
		}
		if n := countRows(t, db, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()"); n != 0 {
			t.Fatalf("Pending created %d tables, want none", n)
		}
		if _, err := Apply(ctx, db); err != nil {
			t.Fatal(err)
		}
		if got, err := Pending(ctx, db); err != nil || len(got) != 0 {
			t.Fatalf("Pending after Apply = %q, %v; want none", got, err)
		}
	})
	t.Run("files of a newer binary", func(t *testing.T) {
		t.Parallel()
		db, _ := freshDB(t)
		if _, err := applyFS(ctx, db, countingFS(2)); err != nil {
			t.Fatal(err)
		}
		got, err := pendingFS(ctx, db, countingFS(4))
		if want := []string{"003_step.sql", "004_step.sql"}; err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("Pending = %q, %v; want %q", got, err, want)
		}
		if n := countRows(t, db, "SELECT COUNT(*) FROM runs"); n != 2 {
			t.Fatalf("runs has %d rows after Pending, want 2 (nothing applied)", n)
		}
	})
	t.Run("no database", func(t *testing.T) {
		t.Parallel()
		_, err := Pending(ctx, serverDB(t))
		if err == nil || !strings.Contains(err.Error(), "no database selected") {
			t.Fatalf("Pending without a database: err = %v, want \"no database selected\"", err)
		}
	})
}
