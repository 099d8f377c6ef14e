package testenv

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Callgrind is a redis-server of a benchmark's own run under valgrind's
// callgrind tool, counting nothing until asked: Instructions counts what
// Redis executes for chosen calls, a figure that does not move with the
// load of a shared machine as CPU time does.
type Callgrind struct {
	*RedisProcess
	out   string // callgrind's output file: dump n goes to out.n
	dumps int
}

// StartRedisCallgrind starts the server on a free port (killed when the
// benchmark ends). Without valgrind (Debian's valgrind package, which
// `make bench-scripts` installs with ensure-tool.sh) the benchmark fails
// (Unavailable).
func StartRedisCallgrind(t testing.TB) *Callgrind {
	t.Helper()
	for _, tool := range []string{"valgrind", "callgrind_control", "redis-server"} {
		RequireTool(t, tool)
	}
	out := filepath.Join(t.TempDir(), "callgrind.out")
	p := &RedisProcess{t: t, Port: FreePort(t),
		wrap: []string{"valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=" + out}}
	p.Start()
	t.Cleanup(p.Kill)
	return &Callgrind{RedisProcess: p, out: out}
}

// Instructions runs fn with the server's instruction count on and returns
// what it counted: the server's work for fn's calls, and any other
// client's meanwhile.
func (c *Callgrind) Instructions(fn func()) int64 {
	c.t.Helper()
	c.control("--instr=on")
	fn()
	c.control("--instr=off")
	c.control("--dump")
	c.dumps++
	n, err := dumpTotal(fmt.Sprintf("%s.%d", c.out, c.dumps))
	if err != nil {
		c.t.Fatal(err)
	}
	return n
}

// control runs callgrind_control on the server's process.
func (c *Callgrind) control(arg string) {
	c.t.Helper()
	cmd := exec.Command("callgrind_control", arg, strconv.Itoa(c.cmd.Process.Pid))
	if out, err := cmd.CombinedOutput(); err != nil {
		c.t.Fatalf("callgrind_control %s: %v: %s", arg, err, out)
	}
}

// dumpTotal reads the instructions a callgrind dump counted (its
// "totals:" line).
func dumpTotal(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("callgrind dump: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "totals:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("callgrind dump %s: %w", path, err)
			}
			return n, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("callgrind dump %s: %w", path, err)
	}
	return 0, fmt.Errorf("callgrind dump %s: no totals line", path)
}
