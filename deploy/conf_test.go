package deploy

import (
	"context"
	"database/sql"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// redis-server starts with deploy/redis.conf and holds the settings the
// code relies on; a warm bucket at its largest (120 fields) stays a listpack.
func TestRedisConf_ServerRunsWithTheSettingsTheCodeReliesOn(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server: %v (run deploy/ensure-services.sh)", err)
	}
	port := testenv.FreePort(t)
	cmd := exec.Command("redis-server", "redis.conf", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", t.TempDir(), "--daemonize", "no")
	var logs testenv.LockedBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port)})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for rdb.Ping(ctx).Err() != nil {
		if ctx.Err() != nil {
			t.Fatalf("redis-server with redis.conf did not answer: %s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for name, want := range map[string]string{
		"appendonly":                "yes",
		"appendfsync":               "everysec",
		"maxmemory-policy":          "noeviction",
		"hash-max-listpack-entries": "128",
		"hash-max-listpack-value":   "64",
		"hll-sparse-max-bytes":      "1000",
		"repl-diskless-sync":        "yes",
		"repl-diskless-sync-delay":  "0",
	} {
		got, err := rdb.ConfigGet(ctx, name).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got[name] != want {
			t.Errorf("%s = %q, want %q", name, got[name], want)
		}
	}
	fields := make([]any, 0, 240)
	for i := range 120 {
		fields = append(fields, "f"+strconv.Itoa(i), strings.Repeat("v", 30))
	}
	if err := rdb.HSet(ctx, "bucket", fields...).Err(); err != nil {
		t.Fatal(err)
	}
	if enc := rdb.ObjectEncoding(ctx, "bucket").Val(); enc != "listpack" {
		t.Fatalf("a 120-field bucket is %s, want listpack", enc)
	}
}

// mariadbd starts with deploy/mariadb/quota.cnf (every option name and
// value accepted), quota's schema applies under it, and the settings hold.
func TestMariaDBConf_ServerRunsWithItAndTheSchemaApplies(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("my_print_defaults", "--defaults-file=mariadb/quota.cnf", "mysqld").Output()
	if err != nil {
		t.Fatalf("my_print_defaults: %v", err)
	}
	opts := strings.Fields(string(out))
	if len(opts) < 5 {
		t.Fatalf("quota.cnf [mysqld]: %q", opts)
	}
	// A smaller redo log than production's, to spare the test 512 MB of disk.
	p := testenv.StartMariaDB(t, append(opts, "--innodb-log-file-size=48M")...)
	p.CreateDatabase("quota_0")
	db, err := sql.Open("mysql", p.DSN("quota_0"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for name, want := range map[string]string{
		"innodb_flush_log_at_trx_commit": "1",
		"sync_binlog":                    "1",
		"tx_isolation":                   "REPEATABLE-READ",
		"max_connections":                "1000",
		"log_bin":                        "ON",
		"binlog_format":                  "ROW",
		"character_set_server":           "utf8mb4",
	} {
		var n, v string
		// name is one of the map's constants (LIKE takes no placeholder).
		if err := db.QueryRow("SHOW GLOBAL VARIABLES LIKE '"+name+"'").Scan(&n, &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if v != want {
			t.Errorf("%s = %q, want %q", name, v, want)
		}
	}
}
