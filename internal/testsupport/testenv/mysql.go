package testenv

import (
	"context"
	"database/sql"
	"testing"
	"time"

	sqlschema "github.com/quota-platform/quota/sql"
)

// MySQL creates one fresh database quota_t_<random hex> with the whole
// schema (sql/*.sql) applied, as MySQLShards does, and returns a pool on it
// and its DSN (for a quotad process started by the test). The database is
// dropped when the test ends.
func MySQL(t testing.TB) (*sql.DB, string) {
	t.Helper()
	db, dsn := EmptyMySQL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := sqlschema.Apply(ctx, db); err != nil {
		t.Fatalf("schema on a fresh test database: %v", err)
	}
	return db, dsn
}

// EmptyMySQL is MySQL without the schema: a fresh database with no tables.
func EmptyMySQL(t testing.TB) (*sql.DB, string) {
	t.Helper()
	admin, err := sql.Open("mysql", MySQLConfig(t, "").FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := "quota_t_" + RandomHex(6)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4"); err != nil {
		admin.Close()
		t.Fatalf("MariaDB: create database %s: %v (run deploy/ensure-services.sh)", name, err)
	}
	dsn := MySQLConfig(t, name).FormatDSN()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(16)
	t.Cleanup(func() {
		db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
		admin.Close()
	})
	return db, dsn
}
