package testenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// LockedBuffer is a bytes.Buffer that a child process may write while a
// test reads it.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var (
	rootOnce sync.Once
	rootDir  string
	rootErr  error

	buildMu  sync.Mutex
	buildDir string
	built    = map[string]string{} // package path -> binary
)

// ModuleRoot is the directory of the module's go.mod.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	rootOnce.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			rootErr = fmt.Errorf("go env GOMOD: %w", err)
			return
		}
		gomod := strings.TrimSpace(string(out))
		if gomod == "" || gomod == os.DevNull {
			rootErr = fmt.Errorf("not inside a Go module")
			return
		}
		rootDir = filepath.Dir(gomod)
	})
	if rootErr != nil {
		t.Fatal(rootErr)
	}
	return rootDir
}

// Binary builds the command at ./cmd/<name> of this module once per test
// process and returns the path of the binary. With QUOTA_TEST_RACE=1 it is
// built with the race detector (quotad then exits 66 on a data race, and
// prints "WARNING: DATA RACE" on stderr).
func Binary(t testing.TB, name string) string {
	t.Helper()
	root := ModuleRoot(t)
	buildMu.Lock()
	defer buildMu.Unlock()
	if b, ok := built[name]; ok {
		return b
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "quota-test-bin-")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = d
	}
	out := filepath.Join(buildDir, name)
	args := []string{"build", "-o", out}
	if os.Getenv("QUOTA_TEST_RACE") == "1" {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./cmd/"+name)...)
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/%s: %v\n%s", name, err, msg)
	}
	built[name] = out
	return out
}

// RemoveBinaries deletes what Binary built; call it from TestMain after m.Run.
func RemoveBinaries() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	buildDir = ""
	built = map[string]string{}
}

// Quotad is a quotad binary started by a test on a free loopback port, with
// only the QUOTA_* settings the test gives (the caller's QUOTA_* environment
// is not inherited). Its working directory is the module root, so the
// default QUOTA_RULES (deploy/rules.yaml) is found. It is SIGKILLed when the
// test ends if still running.
type Quotad struct {
	t    testing.TB
	bin  string
	env  []string
	wrap []string // a command that runs quotad (ip netns exec: a Host's)
	Addr string   // host:port it listens on
	URL  string   // http://Addr

	logs *LockedBuffer // stderr of every run, in order
	// movable: on NewQuotad's free port, which it may leave for another
	// if the first start finds it taken; started: it has started once.
	movable, started bool

	mu        sync.Mutex
	cmd       *exec.Cmd
	exited    chan struct{}
	exitErr   error
	startedAt time.Time
}

// StartQuotad builds quotad (once), starts it with env (KEY=value, on top
// of QUOTA_LISTEN) and waits until GET /healthz answers 200.
func StartQuotad(t testing.TB, env ...string) *Quotad {
	t.Helper()
	q := NewQuotad(t, env...)
	q.Start()
	return q
}

// NewQuotad prepares a quotad on a free port without starting it.
func NewQuotad(t testing.TB, env ...string) *Quotad {
	t.Helper()
	q := newQuotadAt(t, "127.0.0.1:"+strconv.Itoa(FreePort(t)), nil, env...)
	q.movable = true
	return q
}

// newQuotadAt prepares a quotad listening on addr, run through wrap.
func newQuotadAt(t testing.TB, addr string, wrap []string, env ...string) *Quotad {
	t.Helper()
	q := &Quotad{t: t, bin: Binary(t, "quotad"), Addr: addr, URL: "http://" + addr, logs: &LockedBuffer{}, wrap: wrap}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "QUOTA_") {
			q.env = append(q.env, kv)
		}
	}
	// No gRPC unless a test asks (QUOTA_GRPC_LISTEN in env): its default
	// port would be shared by every quotad a test run starts.
	q.env = append(q.env, "QUOTA_LISTEN="+addr, "QUOTA_GRPC_LISTEN=off")
	// No drain wait on SIGTERM (there is no load balancer); a test that
	// measures the drain sets QUOTA_DRAIN in env, which comes later and wins.
	q.env = append(q.env, "QUOTA_DRAIN=0s")
	q.env = append(q.env, env...)
	t.Cleanup(q.Kill)
	return q
}

// Setenv sets env (KEY=value) for the next Start, over what was set before.
func (q *Quotad) Setenv(env ...string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.env = append(q.env, env...)
}

// Start starts (or restarts, on the same port and settings) quotad serve
// and waits until /healthz answers 200. A quotad on NewQuotad's free port
// that finds the port taken at its first start (another test's server
// bound it since FreePort saw it free) moves to another free port, up to
// twice.
func (q *Quotad) Start() {
	q.t.Helper()
	for attempt := 1; ; attempt++ {
		err := q.start()
		if err == nil {
			q.started = true
			return
		}
		if !errors.Is(err, errPortTaken) || !q.movable || q.started || attempt == 3 {
			q.t.Fatal(err)
		}
		q.Addr = "127.0.0.1:" + strconv.Itoa(FreePort(q.t))
		q.URL = "http://" + q.Addr
		q.Setenv("QUOTA_LISTEN=" + q.Addr)
	}
}

// errPortTaken is start's error when quotad exited for want of its port.
var errPortTaken = errors.New("listen address already in use")

// start is one attempt of Start.
func (q *Quotad) start() error {
	q.mu.Lock()
	if q.cmd != nil {
		q.mu.Unlock()
		return fmt.Errorf("quotad %s: already running", q.Addr)
	}
	argv := append(slices.Clone(q.wrap), q.bin, "serve")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = q.env
	cmd.Dir = ModuleRoot(q.t)
	cmd.Stdout = q.logs
	cmd.Stderr = q.logs
	startedAt := time.Now()
	logged := len(q.logs.String())
	if err := cmd.Start(); err != nil {
		q.mu.Unlock()
		return fmt.Errorf("start quotad: %w", err)
	}
	exited := make(chan struct{})
	q.cmd, q.exited, q.exitErr, q.startedAt = cmd, exited, nil, startedAt
	go func() {
		err := cmd.Wait()
		q.mu.Lock()
		q.exitErr = err
		q.mu.Unlock()
		close(exited)
	}()
	q.mu.Unlock()

	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := client.Get(q.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && Listens(cmd.Process.Pid, q.Addr) {
				return nil
			}
		}
		select {
		case <-exited:
			logs := q.Logs()
			q.mu.Lock()
			q.cmd = nil
			q.mu.Unlock()
			if strings.Contains(logs[logged:], "address already in use") {
				return fmt.Errorf("quotad on %s: %w: %s", q.Addr, errPortTaken, logs)
			}
			return fmt.Errorf("quotad exited at start (%v): %s", q.ExitErr(), logs)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("quotad on %s: /healthz did not answer 200 from it within 20 s: %s", q.Addr, q.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (q *Quotad) signal(sig syscall.Signal) (chan struct{}, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cmd == nil {
		return nil, false
	}
	_ = q.cmd.Process.Signal(sig)
	return q.exited, true
}

// Kill SIGKILLs quotad and waits until it has exited; a stopped quotad is
// left alone.
func (q *Quotad) Kill() {
	exited, ok := q.signal(syscall.SIGKILL)
	if !ok {
		return
	}
	<-exited
	q.mu.Lock()
	q.cmd = nil
	q.mu.Unlock()
}

// Term sends SIGTERM and waits up to timeout for quotad to exit; it returns
// the exit status (nil for 0), or an error if it did not exit in time (it
// is then killed).
func (q *Quotad) Term(timeout time.Duration) error {
	exited, ok := q.signal(syscall.SIGTERM)
	if !ok {
		return fmt.Errorf("quotad not running")
	}
	select {
	case <-exited:
	case <-time.After(timeout):
		q.Kill()
		return fmt.Errorf("quotad did not exit within %s of SIGTERM", timeout)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.cmd = nil
	return q.exitErr
}

// Running reports whether the process started last is still alive.
func (q *Quotad) Running() bool {
	q.mu.Lock()
	exited := q.exited
	started := q.cmd != nil
	q.mu.Unlock()
	if !started {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// StartedAt is when the last run was started (Go runtime times such as
// GODEBUG=gctrace's count from about then).
func (q *Quotad) StartedAt() time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.startedAt
}

// ExitErr is how the last run ended (nil while running or after exit 0).
func (q *Quotad) ExitErr() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.exitErr
}

// PID is the process id of the running quotad (0 if none).
func (q *Quotad) PID() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cmd == nil {
		return 0
	}
	return q.cmd.Process.Pid
}

// Logs is everything quotad wrote to stdout and stderr, over all its runs.
func (q *Quotad) Logs() string { return q.logs.String() }

// MetricsText is the raw body of GET /metrics.
func (q *Quotad) MetricsText() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, q.URL+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("/metrics: %d %s", resp.StatusCode, b)
	}
	return string(b), nil
}

// Metrics reads /metrics into series -> value, each series written as in
// the exposition format: `go_goroutines`, `quota_http_requests_total{code="200",route="/v1/check"}`.
func (q *Quotad) Metrics() (map[string]float64, error) {
	text, err := q.MetricsText()
	if err != nil {
		return nil, err
	}
	return ParseMetrics(text), nil
}

// Metric is the value of one series (see Metrics); it fails the test when
// /metrics cannot be read or has no such series.
func (q *Quotad) Metric(series string) float64 {
	q.t.Helper()
	m, err := q.Metrics()
	if err != nil {
		q.t.Fatalf("quotad %s: %v", q.Addr, err)
	}
	v, ok := m[series]
	if !ok {
		q.t.Fatalf("quotad %s: no series %s in /metrics", q.Addr, series)
	}
	return v
}

// ParseMetrics reads Prometheus text exposition into series -> value
// (comments and unparsable lines are skipped).
func ParseMetrics(text string) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i <= 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[strings.TrimSpace(line[:i])] = v
	}
	return out
}

// SumMetric adds up every series of metric name (any labels).
func SumMetric(m map[string]float64, name string) float64 {
	var sum float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			sum += v
		}
	}
	return sum
}
