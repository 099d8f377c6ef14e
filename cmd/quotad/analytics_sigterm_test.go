package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

const sigtermAdmin = "sigterm-test-admin-token-0123"

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startQuotad runs the quotad binary with env and waits for /readyz.
func startQuotad(t *testing.T, bin string, env []string, base string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(os.Environ(), env...)
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			// Another test's quotad may have taken the port (testenv.Listens).
			if resp.StatusCode == 200 && testenv.Listens(cmd.Process.Pid, strings.TrimPrefix(base, "http://")) {
				return cmd, &log
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("quotad not ready: %s", log.String())
	return nil, nil
}

// Calls made just before a SIGTERM are in the stats after a restart: the
// graceful shutdown flushes what analytics holds (the periodic flush is set
// to 10 minutes so that only the shutdown can have written them).
func TestSIGTERMFlushesAnalytics(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the quotad binary")
	}
	// Not parallel: it builds and runs two quotad processes of its own.
	dir := t.TempDir()
	bin := filepath.Join(dir, "quotad")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	_, prefix := testenv.Redis(t)
	_, dsn0 := testenv.MySQL(t)
	_, dsn1 := testenv.MySQL(t)
	rulesPath := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(`rules:
  - name: app_user_iface_hourly
    dimensions: [app_id, user_id, interface_id]
    limit: 30
    window: 1h
    algorithm: fixed_window
`), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	base := "http://" + addr
	env := []string{
		"QUOTA_LISTEN=" + addr, "QUOTA_GRPC_LISTEN=off", "QUOTA_REDIS_ADDRS=" + testenv.RedisAddr(), "QUOTA_REDIS_KEY_PREFIX=" + prefix,
		"QUOTA_MYSQL_SHARDS=" + dsn0 + "," + dsn1, "QUOTA_RULES=" + rulesPath, "QUOTA_ADMIN_TOKEN=" + sigtermAdmin,
		"QUOTA_ANALYTICS_FLUSH=10m", "QUOTA_DRAIN=0s",
	}
	cmd, log := startQuotad(t, bin, env, base)
	allowed, denied := 0, 0
	for i := 0; i < 80; i++ {
		body := fmt.Sprintf(`{"app_id":"term-app","user_id":"u%d","interface_id":"if%d"}`, i%2, i%2)
		resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case 200:
			allowed++
		case 429:
			denied++
		default:
			t.Fatalf("check: %d", resp.StatusCode)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("quotad exit after SIGTERM: %v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "analytics flushed") {
		t.Fatalf("no final flush in the log:\n%s", log.String())
	}

	cmd, log = startQuotad(t, bin, env, base)
	req, _ := http.NewRequest("GET", base+"/v1/apps/term-app/stats", nil)
	req.Header.Set("Authorization", "Bearer "+sigtermAdmin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Calls       int64 `json:"calls"`
		Allowed     int64 `json:"allowed"`
		Denied      int64 `json:"denied"`
		UniqueUsers int64 `json:"unique_users"`
	}
	var raw bytes.Buffer
	_, _ = raw.ReadFrom(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(raw.Bytes(), &st); err != nil {
		t.Fatalf("stats after restart: %v: %s", err, raw.String())
	}
	if st.Calls != 80 || st.Allowed != int64(allowed) || st.Denied != int64(denied) || st.UniqueUsers != 2 {
		t.Fatalf("after restart: %s, want 80 calls (%d allowed, %d denied), 2 users", raw.String(), allowed, denied)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("second quotad: %v\n%s", err, log.String())
	}
}
