package testenv

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Listens reports whether process pid has a TCP socket listening on addr
// (an IPv4 host:port), read from /proc. A server's /healthz answering on
// addr is not enough to know it is the one a test started: FreePort's
// port is free when picked, not when the server binds it, and another
// test's server may take it first (the one started then fails to bind
// and exits, while the other answers).
func Listens(pid int, addr string) bool {
	inode, ok := listeningInode(pid, addr)
	if !ok {
		return false
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false
	}
	want := "socket:[" + inode + "]"
	for _, fd := range fds {
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && link == want {
			return true
		}
	}
	return false
}

// listeningInode is the inode of the socket listening on addr in pid's
// network namespace (/proc/<pid>/net/tcp: local address as hex of the
// IPv4 address in host order and the port, state 0A).
func listeningInode(pid int, addr string) (string, bool) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return "", false
	}
	ip := ap.Addr().As4()
	local := fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], ap.Port())
	table, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(string(table), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) >= 10 && f[1] == local && f[3] == "0A" {
			return f[9], true
		}
	}
	return "", false
}

// RedisProcess is a throwaway redis-server of a test's own, so a test can
// kill it and start it again without touching the shared one.
type RedisProcess struct {
	t    testing.TB
	Port int
	cmd  *exec.Cmd
	args []string // extra redis-server options
	wrap []string // a command that runs redis-server (Callgrind's valgrind, ip netns exec)
	host string   // the address it binds and answers on (default 127.0.0.1; a Host's in a Net)
}

// Addr is host:port of the process.
func (p *RedisProcess) Addr() string { return cmp.Or(p.host, "127.0.0.1") + ":" + strconv.Itoa(p.Port) }

// StartRedis starts redis-server on a free port; it is killed when the test ends.
func StartRedis(t testing.TB) *RedisProcess {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not installed: %v (run deploy/ensure-services.sh)", err)
	}
	p := &RedisProcess{t: t, Port: FreePort(t)}
	p.Start()
	t.Cleanup(p.Kill)
	return p
}

// StartRedisWith is StartRedis with extra redis-server options (e.g.
// "--appendonly", "yes", "--dir", dir: a restart then loads the AOF).
func StartRedisWith(t testing.TB, args ...string) *RedisProcess {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not installed: %v (run deploy/ensure-services.sh)", err)
	}
	p := &RedisProcess{t: t, Port: FreePort(t), args: args}
	t.Cleanup(p.Kill) // first: a server that starts but never answers is killed too
	p.Start()
	return p
}

// Start (re)starts the server on its port and waits until it answers.
func (p *RedisProcess) Start() {
	p.t.Helper()
	args := slices.Concat(p.wrap, []string{"redis-server", "--port", strconv.Itoa(p.Port), "--bind", cmp.Or(p.host, "127.0.0.1"),
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"}, p.args)
	p.cmd = exec.Command(args[0], args[1:]...)
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("start redis-server: %v", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer rdb.Close()
	wait := 10 * time.Second
	if len(p.wrap) > 0 {
		wait = time.Minute
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if rdb.Ping(context.Background()).Err() == nil && Listens(p.cmd.Process.Pid, p.Addr()) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.t.Fatalf("redis-server on %s did not answer", p.Addr())
}

// Kill stops the server at once (SIGKILL) and waits for it to exit.
func (p *RedisProcess) Kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.cmd = nil
}

// WaitStopped returns once the kernel shows the server stopped (state T in
// /proc): a signal is delivered asynchronously, and a server SIGSTOPped on a
// busy machine can answer a few more calls before it stops.
func (p *RedisProcess) WaitStopped(timeout time.Duration) error {
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("%s: not running", p)
	}
	stat := fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid)
	for end := time.Now().Add(timeout); ; time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(stat)
		if err != nil {
			return err
		}
		// pid (comm) state ...: the state follows the last ')'.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'T' {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("%s: not stopped after %s", p, timeout)
		}
	}
}

// Signal sends sig to the server, e.g. SIGSTOP and SIGCONT to make it hang
// and resume with its sockets left open.
func (p *RedisProcess) Signal(sig os.Signal) error {
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("%s: not running", p)
	}
	return p.cmd.Process.Signal(sig)
}

// String describes the process.
func (p *RedisProcess) String() string { return fmt.Sprintf("redis-server@%s", p.Addr()) }

// CPUTime is the CPU time the running redis-server has used since it
// started (ProcessCPUTime).
func (p *RedisProcess) CPUTime() time.Duration {
	p.t.Helper()
	if p.cmd == nil || p.cmd.Process == nil {
		p.t.Fatalf("redis-server on %s: not running", p.Addr())
	}
	d, err := ProcessCPUTime(p.cmd.Process.Pid)
	if err != nil {
		p.t.Fatalf("redis-server on %s: %v", p.Addr(), err)
	}
	return d
}
