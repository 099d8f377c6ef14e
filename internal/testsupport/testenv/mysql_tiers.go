package testenv

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	sqlschema "github.com/quota-platform/quota/sql"
)

// MySQLDSNBase is the account the tests use (QUOTA_TEST_MYSQL_DSN_BASE,
// default quota:quota@tcp(127.0.0.1:3306)/): a user that may create and
// drop databases named quota%.
func MySQLDSNBase() string {
	if b := os.Getenv("QUOTA_TEST_MYSQL_DSN_BASE"); b != "" {
		return b
	}
	return "quota:quota@tcp(127.0.0.1:3306)/"
}

// MySQLConfig returns the test account's DSN for database name (none when
// ""), with the options the cold tier is meant to run with.
func MySQLConfig(t testing.TB, name string) *mysql.Config {
	t.Helper()
	cfg, err := mysql.ParseDSN(MySQLDSNBase())
	if err != nil {
		t.Fatalf("QUOTA_TEST_MYSQL_DSN_BASE %q: %v", MySQLDSNBase(), err)
	}
	cfg.DBName = name
	cfg.Timeout = 5 * time.Second
	cfg.InterpolateParams = true
	cfg.MultiStatements = true // as cold.ShardDSN: the cold tier needs both
	return cfg
}

// MySQLShards creates n fresh databases quota_t_<random hex>, applies the
// schema (package sql) to each, and returns a pool on each, in order. The
// databases are dropped when the test ends. A MariaDB that does not answer
// fails the test (run deploy/ensure-services.sh).
func MySQLShards(t testing.TB, n int) []*sql.DB {
	t.Helper()
	server, err := sql.Open("mysql", MySQLConfig(t, "").FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := server.PingContext(ctx); err != nil {
		server.Close()
		t.Fatalf("MariaDB at %s: %v (run deploy/ensure-services.sh)", MySQLConfig(t, "").Addr, err)
	}
	var names []string
	t.Cleanup(func() {
		for _, name := range names {
			if _, err := server.Exec("DROP DATABASE IF EXISTS `" + name + "`"); err != nil {
				t.Errorf("drop database %s: %v", name, err)
			}
		}
		server.Close()
	})
	dbs := make([]*sql.DB, n)
	for i := range dbs {
		name := "quota_t_" + RandomHex(6)
		if _, err := server.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4"); err != nil {
			t.Fatalf("create database %s: %v (the test user needs ALL on quota%%)", name, err)
		}
		names = append(names, name)
		db, err := sql.Open("mysql", MySQLConfig(t, name).FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(40)
		db.SetMaxIdleConns(40)
		t.Cleanup(func() { db.Close() })
		if _, err := sqlschema.Apply(ctx, db); err != nil {
			t.Fatalf("schema on %s: %v", name, err)
		}
		dbs[i] = db
	}
	return dbs
}
