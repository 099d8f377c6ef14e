package gateways_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

const adminToken = "gateways-admin-token-0123456789"

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBinaries()
	os.Exit(code)
}

// startQuotad starts quotad on its own Redis key prefix and its own MySQL
// shard, with the rules given and analytics flushed every 200 ms.
func startQuotad(t *testing.T, rulesYAML string, env ...string) *testenv.Quotad {
	t.Helper()
	_, prefix := testenv.Redis(t)
	_, dsn := testenv.MySQL(t)
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(rulesYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{
		"QUOTA_REDIS_ADDRS=" + testenv.RedisAddr(), "QUOTA_REDIS_KEY_PREFIX=" + prefix,
		"QUOTA_MYSQL_SHARDS=" + dsn, "QUOTA_RULES=" + rules, "QUOTA_ADMIN_TOKEN=" + adminToken,
		"QUOTA_ANALYTICS_FLUSH=200ms", "QUOTA_ANALYTICS_HOLD_MINUTE=off",
	}
	return testenv.StartQuotad(t, append(base, env...)...)
}

// appStats polls GET /v1/apps/{app}/stats for today until calls reaches
// want (analytics flushes every 200 ms) or 15 s pass.
func appStats(t *testing.T, q *testenv.Quotad, app string, want int64) map[string]any {
	t.Helper()
	url := q.URL + "/v1/apps/" + app + "/stats?date=" + time.Now().UTC().Format("2006-01-02")
	var body map[string]any
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body = nil
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err == nil && resp.StatusCode == 200 && body["calls"] == float64(want) {
			return body
		}
	}
	t.Fatalf("stats of %s never reached %d calls: %v", app, want, body)
	return nil
}

// upstream is the service behind the gateway: it counts the requests that
// reach it and echoes the headers it was given.
type upstream struct {
	srv  *http.Server
	addr string
	hits atomic.Int64
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{addr: ln.Addr().String()}
	u.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		w.Header().Set("X-Seen-App", r.Header.Get("X-App-Id"))
		w.Header().Set("X-Seen-Remaining", r.Header.Get("RateLimit-Remaining"))
		fmt.Fprintln(w, "hello from upstream")
	})}
	go u.srv.Serve(ln)
	t.Cleanup(func() { u.srv.Close() })
	return u
}

// nginx is an nginx process of the test's own: its own prefix, config,
// temp directories and port; stopped by its PID when the test ends.
type nginx struct {
	Addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// startNginx runs nginx (one process: master_process off, daemon off) with
// conf, in which {dir} is the nginx directory and {port} its port.
func startNginx(t *testing.T, conf string) *nginx {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/nginx"); err != nil {
			t.Fatalf("nginx is not installed: run internal/testsupport/testenv/ensure-tool.sh nginx (make test does): %v", err)
		}
	}
	dir := t.TempDir()
	for _, d := range []string{"logs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	port := testenv.FreePort(t)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(strings.NewReplacer("{dir}", dir, "{port}", strconv.Itoa(port)).Replace(conf)), 0o644); err != nil {
		t.Fatal(err)
	}
	n := &nginx{Addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, done: make(chan struct{})}
	n.cmd = exec.Command(bin, "-p", dir+"/", "-c", path, "-e", filepath.Join(dir, "logs", "error.log"))
	out := &testenv.LockedBuffer{}
	n.cmd.Stdout, n.cmd.Stderr = out, out
	if err := n.cmd.Start(); err != nil {
		t.Fatalf("start nginx: %v", err)
	}
	go func() { n.cmd.Wait(); close(n.done) }()
	t.Cleanup(n.stop)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", n.Addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			// Another test's server may have taken the port (testenv.Listens).
			if testenv.Listens(n.cmd.Process.Pid, n.Addr) {
				return n
			}
		}
		select {
		case <-n.done:
			t.Fatalf("nginx exited at start: %s %s", out, n.errorLog())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not listen on %s: %s", n.Addr, n.errorLog())
		}
	}
}

func (n *nginx) errorLog() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "logs", "error.log"))
	return string(b)
}

// stop asks nginx to quit (SIGQUIT, graceful) by its PID and kills it if
// it has not exited within 5 s.
func (n *nginx) stop() {
	_ = n.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-n.done:
	case <-time.After(5 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.done
	}
}

// get sends GET url with the headers (name, value, ...) and returns the
// answer with its body read.
func get(t *testing.T, url string, header ...string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}
