package testenv

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	sqlschema "github.com/quota-platform/quota/sql"
)

// MariaDBProcess is a private mariadbd of a test's own, on a spare loopback
// port with its data directory under the test's temporary directory, so a
// test can kill it (SIGKILL) and start it again on the same data without
// touching the shared server on 3306. It has the user quota/quota with every
// privilege.
type MariaDBProcess struct {
	t       testing.TB
	Port    int
	dataDir string
	socket  string

	args []string // extra mariadbd options

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	log    *LockedBuffer
}

// StartMariaDB initialises a data directory (mariadb-install-db, about 2 s),
// starts mariadbd on a free port, waits until it answers and creates the
// user quota/quota. The server is killed when the test ends. Options are
// extra mariadbd options, after the defaults (a later one wins), e.g.
// "--innodb-buffer-pool-size=128M" (the default here is 32M).
func StartMariaDB(t testing.TB, options ...string) *MariaDBProcess {
	t.Helper()
	for _, bin := range []string{"mariadb-install-db", "mariadbd"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not installed: %v (apt-get install mariadb-server)", bin, err)
		}
	}
	dir, err := os.MkdirTemp("", "quota-mariadb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := &MariaDBProcess{
		t:       t,
		Port:    FreePort(t),
		dataDir: filepath.Join(dir, "data"),
		socket:  filepath.Join(dir, "sock"), // short: a unix socket path has at most 107 bytes
		args:    options,
		log:     &LockedBuffer{},
	}
	install := exec.Command("mariadb-install-db", "--no-defaults", "--datadir="+p.dataDir,
		"--auth-root-authentication-method=normal", "--skip-test-db", "--user=root")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	t.Cleanup(p.Kill)
	p.Start()

	root, err := sql.Open("mysql", "root@unix("+p.socket+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, q := range []string{
		"CREATE USER 'quota'@'%' IDENTIFIED BY 'quota'",
		"CREATE USER 'quota'@'localhost' IDENTIFIED BY 'quota'",
		"GRANT ALL PRIVILEGES ON *.* TO 'quota'@'%'",
		"GRANT ALL PRIVILEGES ON *.* TO 'quota'@'localhost'",
	} {
		if _, err := root.ExecContext(ctx, q); err != nil {
			t.Fatalf("mariadb %s: %s: %v", p, q, err)
		}
	}
	return p
}

// Start (re)starts mariadbd on the same data directory and port and waits
// until it accepts connections (InnoDB crash recovery included).
func (p *MariaDBProcess) Start() {
	p.t.Helper()
	p.mu.Lock()
	if p.cmd != nil {
		p.mu.Unlock()
		p.t.Fatalf("%s: already running", p)
	}
	cmd := exec.Command("mariadbd", "--no-defaults", "--datadir="+p.dataDir,
		"--port="+strconv.Itoa(p.Port), "--bind-address=127.0.0.1", "--socket="+p.socket,
		"--user=root", "--innodb-buffer-pool-size=32M", "--skip-log-bin",
		"--skip-name-resolve", "--pid-file="+filepath.Join(filepath.Dir(p.dataDir), "pid"))
	cmd.Args = append(cmd.Args, p.args...)
	cmd.Stdout = p.log
	cmd.Stderr = p.log
	if err := cmd.Start(); err != nil {
		p.mu.Unlock()
		p.t.Fatalf("start mariadbd: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()

	db, err := sql.Open("mysql", "root@unix("+p.socket+")/")
	if err != nil {
		p.t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-exited:
			p.t.Fatalf("mariadbd exited at start: %s", p.Log())
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("mariadbd on port %d did not answer within 60 s: %v\n%s", p.Port, err, p.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill stops the server at once (SIGKILL), as a crash or a pulled plug
// would, and waits for it to exit. Killing a stopped server does nothing.
func (p *MariaDBProcess) Kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// DSN is the go-sql-driver DSN of database db (may be "") as user quota.
func (p *MariaDBProcess) DSN(db string) string {
	c := mysql.NewConfig()
	c.User, c.Passwd = "quota", "quota"
	c.Net, c.Addr = "tcp", "127.0.0.1:"+strconv.Itoa(p.Port)
	c.DBName = db
	c.Timeout = 2 * time.Second
	return c.FormatDSN()
}

// CreateDatabase creates database name with the whole schema (sql/*.sql)
// applied and returns its DSN.
func (p *MariaDBProcess) CreateDatabase(name string) string {
	p.t.Helper()
	admin, err := sql.Open("mysql", p.DSN(""))
	if err != nil {
		p.t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"); err != nil {
		p.t.Fatalf("%s: create database %s: %v", p, name, err)
	}
	dsn := p.DSN(name)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		p.t.Fatal(err)
	}
	defer db.Close()
	if _, err := sqlschema.Apply(ctx, db); err != nil {
		p.t.Fatalf("%s: apply schema to %s: %v", p, name, err)
	}
	return dsn
}

// Log is what mariadbd printed so far.
func (p *MariaDBProcess) Log() string { return p.log.String() }

// String describes the process.
func (p *MariaDBProcess) String() string { return fmt.Sprintf("mariadbd@127.0.0.1:%d", p.Port) }

// CPUTime is the CPU time (user and system, every thread) the running
// mariadbd has used since it started: what a benchmark charges to the
// database when this server is its alone.
func (p *MariaDBProcess) CPUTime() time.Duration {
	p.t.Helper()
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		p.t.Fatalf("%s: not running", p)
	}
	d, err := ProcessCPUTime(cmd.Process.Pid)
	if err != nil {
		p.t.Fatalf("%s: %v", p, err)
	}
	return d
}

// ProcessCPUTime reads a process's user and system CPU time from
// /proc/PID/stat (fields 14 and 15, in USER_HZ: 100 a second on Linux).
func ProcessCPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("cpu time of process %d: %w", pid, err)
	}
	// The command (field 2) is in parentheses and may hold spaces: count
	// from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("cpu time of process %d: malformed stat %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu time of process %d: short stat %q", pid, b)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("cpu time of process %d: %w", pid, err)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// Shard is database name on p with the schema, opened as quotad opens a
// shard (cold.ShardDSN: parameters interpolated); it is closed when the
// test ends.
func (p *MariaDBProcess) Shard(tb testing.TB, name string) *sql.DB {
	cfg, err := mysql.ParseDSN(p.CreateDatabase(name))
	if err != nil {
		tb.Fatal(err)
	}
	cfg.InterpolateParams = true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}
