package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	sqlschema "github.com/quota-platform/quota/sql"
)

var quotadBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "quotad-test")
	if err != nil {
		panic(err)
	}
	quotadBin = filepath.Join(dir, "quotad")
	build := exec.Command("go", "build", "-o", quotadBin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build quotad:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const validRules = `rules:
  - {name: per_user, dimensions: [user_id], limit: 2, window: 1h, algorithm: fixed_window}
`

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestStartup_InvalidConfigurationExitsWithOneClearLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := writeFile(t, dir, "good.yaml", validRules)
	cases := []struct {
		name string
		env  []string
		want string
	}{
		{"bad fail mode", []string{"QUOTA_FAIL_MODE=maybe", "QUOTA_RULES=" + good}, "QUOTA_FAIL_MODE"},
		{"bad listen", []string{"QUOTA_LISTEN=nohost", "QUOTA_RULES=" + good}, "QUOTA_LISTEN"},
		{"public listen without admin token", []string{"QUOTA_LISTEN=0.0.0.0:0", "QUOTA_RULES=" + good}, "QUOTA_ADMIN_TOKEN"},
		{"bad timeout", []string{"QUOTA_REDIS_TIMEOUT=fast", "QUOTA_RULES=" + good}, "QUOTA_REDIS_TIMEOUT"},
		{"missing rules file", []string{"QUOTA_RULES=" + filepath.Join(dir, "nope.yaml")}, "no such file"},
		{"invalid rules file", []string{"QUOTA_RULES=" + writeFile(t, dir, "bad.yaml", "rules:\n  - {name: x, dimensions: [a], limit: 0, window: 1h, algorithm: fixed_window}\n")}, "limit must be"},
		{"unknown algorithm", []string{"QUOTA_RULES=" + writeFile(t, dir, "algo.yaml", "rules:\n  - {name: x, dimensions: [a], limit: 1, window: 1h, algorithm: leaky}\n")}, "unknown algorithm"},
		{"shard without a database", []string{"QUOTA_RULES=" + good, "QUOTA_MYSQL_SHARDS=quota:quota@tcp(127.0.0.1:3306)/"}, "QUOTA_MYSQL_SHARDS entry 0: names no database"},
		{"invalid envoy config", []string{"QUOTA_RULES=" + good, "QUOTA_ENVOY_CONFIG=" + writeFile(t, dir, "envoy.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")}, "QUOTA_ENVOY_CONFIG: " + dir + "/envoy.yaml: invalid rate limit unit 'fortnight'"},
		{"bad grpc listen", []string{"QUOTA_RULES=" + good, "QUOTA_GRPC_LISTEN=nohost"}, "QUOTA_GRPC_LISTEN"},
		{"relative rules state", []string{"QUOTA_RULES=" + good, "QUOTA_RULES_STATE=state.yaml"}, "QUOTA_RULES_STATE \"state.yaml\": want an absolute path"},
		{"rules state in no directory", []string{"QUOTA_RULES=" + good, "QUOTA_RULES_STATE=" + filepath.Join(dir, "nope", "s.yaml")}, "its directory does not exist"},
		{"rules state is the rules file", []string{"QUOTA_RULES=" + good, "QUOTA_RULES_STATE=" + good}, "is the rules file (QUOTA_RULES)"},
		{"rules state unreadable", []string{"QUOTA_RULES=" + good, "QUOTA_RULES_STATE=" + writeFile(t, dir, "state.yaml", "rules: [")}, "remove the file to start from the rules file"},
		{"unknown command", []string{"QUOTA_RULES=" + good}, "unknown command"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"serve"}
			if tc.name == "unknown command" {
				args = []string{"frobnicate"}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, quotadBin, args...)
			cmd.Env = append(environWithoutQuota(), append([]string{"QUOTA_GRPC_LISTEN=off"}, tc.env...)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			if err == nil {
				t.Fatal("quotad started")
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("stderr %q, want one line mentioning %q", stderr.String(), tc.want)
			}
		})
	}
}

func TestStartup_SchemaOnStart(t *testing.T) {
	t.Parallel()
	rulesPath := writeFile(t, t.TempDir(), "rules.yaml", validRules)
	cases := []struct {
		name   string
		env    []string
		starts bool
		want   string   // the one line of stderr when it does not start
		left   []string // schema files the unmigrated shard lacks afterwards; nil: all of them
	}{
		{name: "check (default): a shard without the schema stops start-up", want: "mysql shard 1 (database quota_t_"},
		{name: "apply: the missing files are applied", env: []string{"QUOTA_SCHEMA_ON_START=apply"}, starts: true, left: []string{}},
		{name: "off: not looked at", env: []string{"QUOTA_SCHEMA_ON_START=off"}, starts: true},
		{name: "analytics and tiering off: MySQL is not written", env: []string{"QUOTA_ANALYTICS=off", "QUOTA_TIERING=off"}, starts: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, migrated := testenv.MySQL(t)
			empty, unmigrated := testenv.EmptyMySQL(t)
			env := append([]string{"QUOTA_MYSQL_SHARDS=" + migrated + "," + unmigrated}, tc.env...)
			if tc.starts {
				startServer(t, rulesPath, env...)
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, quotadBin, "serve")
				cmd.Env = append(environWithoutQuota(), append(env, "QUOTA_RULES="+rulesPath,
					fmt.Sprintf("QUOTA_LISTEN=127.0.0.1:%d", testenv.FreePort(t)), "QUOTA_GRPC_LISTEN=off")...)
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				if err := cmd.Run(); err == nil {
					t.Fatal("quotad started")
				}
				lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
				if len(lines) != 1 || !strings.Contains(lines[0], tc.want) ||
					!strings.Contains(lines[0], strings.Join(sqlschema.Files(), ", ")) || !strings.Contains(lines[0], "quotad migrate-schema") {
					t.Fatalf("stderr %q, want one line naming %q, the missing files and the remedy", stderr.String(), tc.want)
				}
			}
			left, err := sqlschema.Pending(context.Background(), empty)
			want := tc.left
			if want == nil {
				want = sqlschema.Files()
			}
			if err != nil || !slices.Equal(left, want) {
				t.Fatalf("files the unmigrated shard lacks: %q, %v; want %q", left, err, want)
			}
		})
	}
}

// A shard that does not answer at start does not keep quotad from
// answering checks: it warns, and /readyz reports the shard. In open mode
// (the default) the instance stays ready, since its checks are still
// answered as open mode promises; in closed mode it is not ready.
func TestStartup_UnreachableShardWarnsAndServes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode  string
		ready int
	}{{"open", http.StatusOK}, {"closed", http.StatusServiceUnavailable}} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			dead := fmt.Sprintf("quota:quota@tcp(127.0.0.1:%d)/quota_gone", testenv.FreePort(t))
			s := startServer(t, writeFile(t, t.TempDir(), "rules.yaml", validRules), "QUOTA_MYSQL_SHARDS="+dead, "QUOTA_FAIL_MODE="+tc.mode)
			resp, err := http.Post(s.url+"/v1/check", "application/json", strings.NewReader(`{"user_id":"u"}`))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("check: %d, want 200", resp.StatusCode)
			}
			if !strings.Contains(s.logs.String(), "its schema is not checked") {
				t.Fatalf("no warning about the unreachable shard: %s", s.logs)
			}
			status, checks := readyz(t, s.url)
			if status != tc.ready || checks["mysql_shard_0"] == "ok" || checks["mysql_shard_0"] == "" {
				t.Fatalf("/readyz in %s mode with its only shard unreachable: %d %v, want %d naming the shard", tc.mode, status, checks, tc.ready)
			}
		})
	}
}

// readyz is GET /readyz: its status and each dependency's answer.
func readyz(t *testing.T, url string) (int, map[string]string) {
	t.Helper()
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Checks map[string]string }
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("/readyz: %v: %s", err, b)
	}
	return resp.StatusCode, body.Checks
}

// environWithoutQuota is the test's environment minus QUOTA_* settings, so
// that a token or address set around `go test` cannot change what is tested.
func environWithoutQuota() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "QUOTA_") {
			env = append(env, kv)
		}
	}
	return env
}

// syncBuffer is a bytes.Buffer safe to read while the child process writes it.
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

// server is a running quotad binary.
type server struct {
	t    *testing.T
	cmd  *exec.Cmd
	url  string
	logs *syncBuffer
}

func startServer(t *testing.T, rulesPath string, env ...string) *server {
	t.Helper()
	return startServerBinary(t, quotadBin, rulesPath, env...)
}

func startServerBinary(t *testing.T, bin, rulesPath string, env ...string) *server {
	t.Helper()
	port := testenv.FreePort(t)
	_, dsn0 := testenv.MySQL(t)
	_, dsn1 := testenv.MySQL(t)
	cmd := exec.Command(bin)
	cmd.Env = append(environWithoutQuota(),
		fmt.Sprintf("QUOTA_LISTEN=127.0.0.1:%d", port),
		"QUOTA_GRPC_LISTEN=off", // a test that wants it passes a port of its own in env
		"QUOTA_MYSQL_SHARDS="+dsn0+","+dsn1,
		"QUOTA_RULES="+rulesPath,
		"QUOTA_REDIS_KEY_PREFIX=t:"+testenv.RandomHex(6)+":",
		"QUOTA_ADMIN_TOKEN=e2e-admin-token-0123456789",
		"QUOTA_DRAIN=0s", // env may set its own, which comes later and wins
	)
	cmd.Env = append(cmd.Env, env...)
	logs := &syncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, cmd: cmd, url: fmt.Sprintf("http://127.0.0.1:%d", port), logs: logs}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		// Another test's quotad may have taken the port (testenv.Listens).
		if resp, err := http.Get(s.url + "/healthz"); err == nil {
			resp.Body.Close()
			if testenv.Listens(cmd.Process.Pid, fmt.Sprintf("127.0.0.1:%d", port)) {
				return s
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("quotad did not come up: %s", logs)
	return nil
}

func (s *server) rulesVersion() string {
	s.t.Helper()
	resp, err := http.Get(s.url + "/v1/rules")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Version string }
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &body); err != nil {
		s.t.Fatalf("rules: %s", b)
	}
	return body.Version
}

func (s *server) waitVersion(pred func(string) bool) string {
	s.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		v := s.rulesVersion()
		if pred(v) || time.Now().After(deadline) {
			return v
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSIGHUP_ReloadsValidRulesAndKeepsOldOnInvalid(t *testing.T) {
	t.Parallel()
	path := writeFile(t, t.TempDir(), "rules.yaml", validRules)
	s := startServer(t, path)
	v1 := s.rulesVersion()

	writeFile(t, filepath.Dir(path), "rules.yaml", "rules:\n  - {name: per_user, dimensions: [user_id], limit: 0, window: 1h, algorithm: fixed_window}\n")
	_ = s.cmd.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(s.logs.String(), "rules reload failed") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(s.logs.String(), "rules reload failed") {
		t.Fatalf("no reload failure logged: %s", s.logs)
	}
	if v := s.rulesVersion(); v != v1 {
		t.Fatalf("an invalid file replaced the rules: %s -> %s", v1, v)
	}

	writeFile(t, filepath.Dir(path), "rules.yaml", strings.Replace(validRules, "limit: 2", "limit: 3", 1))
	_ = s.cmd.Process.Signal(syscall.SIGHUP)
	if v := s.waitVersion(func(v string) bool { return v != v1 }); v == v1 {
		t.Fatalf("a valid file was not loaded: %s", s.logs)
	}
}

func TestServe_AnswersChecksAndMetrics(t *testing.T) {
	t.Parallel()
	s := startServer(t, writeFile(t, t.TempDir(), "rules.yaml", validRules))
	for i, want := range []int{200, 200, 429} {
		resp, err := http.Post(s.url+"/v1/check", "application/json", strings.NewReader(`{"user_id":"u"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("call %d: %d, want %d", i, resp.StatusCode, want)
		}
	}
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`quota_checks_total{decision="allowed",rule="per_user"} 2`,
		`quota_checks_total{decision="denied",rule="per_user"} 1`,
		`quota_check_duration_seconds_count{route="/v1/check"} 3`,
	} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if ready, err := http.Get(s.url + "/readyz"); err != nil || ready.StatusCode != 200 {
		t.Fatalf("readyz: %v %v", err, ready)
	}
}
