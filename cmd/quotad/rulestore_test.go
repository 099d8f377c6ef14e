package main_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

const storeAdmin = "e2e-admin-token-0123456789" // startServer's

func putRules(t *testing.T, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("PUT", url+"/v1/rules", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+storeAdmin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v struct{ Version string }
	_ = json.Unmarshal(b, &v)
	if v.Version != "" {
		return resp.StatusCode, v.Version
	}
	return resp.StatusCode, string(b)
}

// waitAll waits until every server has version in force and returns how
// long that took from since.
func waitAll(t *testing.T, since time.Time, version string, servers ...*server) time.Duration {
	t.Helper()
	for _, s := range servers {
		if v := s.waitVersion(func(v string) bool { return v == version }); v != version {
			t.Fatalf("%s still on %s, want %s: %s", s.url, v, version, s.logs)
		}
	}
	return time.Since(since)
}

// Two quotad processes on one Redis: the first seeds the shared store from
// its file and the second, whose file the store has never had in force,
// puts its file in force for both; a PUT on either reaches the other
// within 2 s (measured) and writes neither rules file (they are the
// operator's); SIGHUP on one instance writes its file to the store for
// all, and an invalid file changes nothing anywhere.
func TestRulesStore_PutAndSIGHUPOnOneInstanceReachEveryInstance(t *testing.T) {
	t.Parallel()
	prefix := "QUOTA_REDIS_KEY_PREFIX=t:" + testenv.RandomHex(6) + ":"
	env := []string{prefix, "QUOTA_ANALYTICS=off", "QUOTA_TIERING=off"} // the default QUOTA_RULES_POLL (1s)
	pathA := writeFile(t, t.TempDir(), "rules.yaml", validRules)
	a := startServer(t, pathA, env...)
	pathB := writeFile(t, t.TempDir(), "rules.yaml", strings.Replace(validRules, "limit: 2", "limit: 9", 1))
	fileB, _ := os.ReadFile(pathB)
	fileA, _ := os.ReadFile(pathA)
	va := a.rulesVersion()
	b := startServer(t, pathB, env...)
	v0 := b.rulesVersion()
	if v0 == va {
		t.Fatalf("b starts on a's rules %s, want its own new file's", va)
	}
	if got := waitAll(t, time.Now(), v0, a); got > 2*time.Second {
		t.Errorf("b's new file reached a after %s", got)
	}

	var worst time.Duration
	for i, tc := range []struct {
		to, other *server
		limit     string
	}{{a, b, "3"}, {b, a, "4"}} {
		began := time.Now()
		code, v := putRules(t, tc.to.url, `{"rules":[{"name":"per_user","dimensions":["user_id"],"limit":`+tc.limit+`,"window":"1h","algorithm":"fixed_window"}]}`)
		if code != http.StatusOK {
			t.Fatalf("PUT %d: %d %s", i, code, v)
		}
		took := waitAll(t, began, v, tc.other)
		worst = max(worst, took)
		if took > 2*time.Second {
			t.Errorf("PUT %d reached the other instance after %s, want within 2 s", i, took)
		}
	}
	if got, _ := os.ReadFile(pathA); !bytes.Equal(got, fileA) {
		t.Errorf("a's file written by a PUT: %s", got)
	}
	if got, _ := os.ReadFile(pathB); !bytes.Equal(got, fileB) {
		t.Errorf("b's file written by a PUT: %s", got)
	}
	t.Logf("PUT on one instance in force on the other after at most %s (default QUOTA_RULES_POLL=1s)", worst.Round(time.Millisecond))

	// SIGHUP: an invalid file changes nothing, anywhere.
	before := a.rulesVersion()
	if err := os.WriteFile(pathB, []byte("rules:\n  - {name: per_user, dimensions: [user_id], limit: 0, window: 1h, algorithm: fixed_window}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = b.cmd.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(b.logs.String(), "rules reload failed") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(1200 * time.Millisecond) // a poll of a
	if va, vb := a.rulesVersion(), b.rulesVersion(); va != before || vb != before {
		t.Fatalf("an invalid file on b changed the rules: a %s b %s, want %s", va, vb, before)
	}
	// A valid file reaches both.
	if err := os.WriteFile(pathB, fileB, 0o644); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_ = b.cmd.Process.Signal(syscall.SIGHUP)
	vb := b.waitVersion(func(v string) bool { return v != before })
	if vb == before {
		t.Fatalf("SIGHUP with a valid file did not change b: %s", b.logs)
	}
	if took := waitAll(t, began, vb, a); took > 2*time.Second {
		t.Errorf("b's SIGHUP reached a after %s, want within 2 s", took)
	}
}

// With QUOTA_RULES_STORE=file each instance keeps its own rules, as before
// the shared store: a PUT changes one instance only, and no file.
func TestRulesStore_FileModeKeepsRulesPerInstance(t *testing.T) {
	t.Parallel()
	prefix := "QUOTA_REDIS_KEY_PREFIX=t:" + testenv.RandomHex(6) + ":"
	env := []string{prefix, "QUOTA_RULES_STORE=file", "QUOTA_ANALYTICS=off", "QUOTA_TIERING=off"}
	pathA := writeFile(t, t.TempDir(), "rules.yaml", validRules)
	a := startServer(t, pathA, env...)
	b := startServer(t, writeFile(t, t.TempDir(), "rules.yaml", strings.Replace(validRules, "limit: 2", "limit: 9", 1)), env...)
	fileA, _ := os.ReadFile(pathA)
	va, vb := a.rulesVersion(), b.rulesVersion()
	if va == vb {
		t.Fatal("two different files gave one version")
	}
	code, v := putRules(t, a.url, `{"rules":[{"name":"per_user","dimensions":["user_id"],"limit":3,"window":"1h","algorithm":"fixed_window"}]}`)
	if code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, v)
	}
	time.Sleep(1500 * time.Millisecond) // more than a poll period of the redis mode
	if got := b.rulesVersion(); got != vb {
		t.Fatalf("file mode: a PUT on a changed b: %s -> %s", vb, got)
	}
	if got, _ := os.ReadFile(pathA); !bytes.Equal(got, fileA) {
		t.Errorf("a's file written by its PUT: %s", got)
	}
}

// With the shared store unreachable a PUT is refused (503) and changes
// nothing: a change on one instance alone would split the fleet's rules.
// Checks go on under the rules in force.
func TestRulesStore_PutWithRedisDownIs503AndChangesNothing(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	path := writeFile(t, t.TempDir(), "rules.yaml", validRules)
	s := startServer(t, path, "QUOTA_REDIS_ADDRS="+r.Addr(), "QUOTA_ANALYTICS=off", "QUOTA_TIERING=off")
	before := s.rulesVersion()
	fileBefore, _ := os.ReadFile(path)
	r.Kill()
	code, body := putRules(t, s.url, `{"rules":[{"name":"per_user","dimensions":["user_id"],"limit":3,"window":"1h","algorithm":"fixed_window"}]}`)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "rules_store_unavailable") {
		t.Fatalf("PUT with Redis down: %d %s", code, body)
	}
	if v := s.rulesVersion(); v != before {
		t.Fatalf("a refused PUT changed the rules: %s -> %s", before, v)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, fileBefore) {
		t.Fatalf("a refused PUT wrote the file: %s", got)
	}
}
