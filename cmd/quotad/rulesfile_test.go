package main_test

import (
	"bytes"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// perUser is a rules file of one rule, per_user, with the given limit.
func perUser(limit string) string {
	return "rules:\n  - {name: per_user, dimensions: [user_id], limit: " + limit + ", window: 1h, algorithm: fixed_window}\n"
}

// fleetEnv is the environment of quotads sharing one rules store (a key
// prefix of their own on the test Redis).
func fleetEnv(extra ...string) []string {
	return append([]string{"QUOTA_REDIS_KEY_PREFIX=t:" + testenv.RandomHex(6) + ":", "QUOTA_ANALYTICS=off", "QUOTA_TIERING=off",
		"QUOTA_RULES_POLL=200ms", "QUOTA_ADMIN_TOKEN=" + storeAdmin}, extra...)
}

func versionAt(t *testing.T, url string) string {
	t.Helper()
	return (&server{t: t, url: url}).rulesVersion()
}

// allowedCalls counts the calls of one new user allowed before the first
// 429 (at most max).
func allowedCalls(t *testing.T, url string, max int) int {
	t.Helper()
	user := testenv.RandomHex(8)
	for i := range max {
		resp, err := http.Post(url+"/v1/check", "application/json", strings.NewReader(`{"user_id":"`+user+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			return i
		}
	}
	return max
}

func restart(t *testing.T, q *testenv.Quotad) {
	t.Helper()
	if err := q.Term(10 * time.Second); err != nil {
		t.Fatalf("stop: %v\n%s", err, q.Logs())
	}
	q.Start()
}

// One instance on the shared store, its file edited; a restart or a SIGHUP
// puts the edit in force (not the store's older copy), and checks count
// against the new limit.
func TestRulesFile_AnEditThenARestartOrSIGHUPIsInForce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		after func(*testing.T, *testenv.Quotad)
	}{
		{"restart", restart},
		{"SIGHUP", func(t *testing.T, q *testenv.Quotad) { _ = syscall.Kill(q.PID(), syscall.SIGHUP) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, t.TempDir(), "rules.yaml", perUser("2"))
			q := testenv.StartQuotad(t, fleetEnv("QUOTA_RULES="+path)...)
			before := versionAt(t, q.URL)
			writeFile(t, filepath.Dir(path), "rules.yaml", perUser("3"))
			tc.after(t, q)
			s := &server{t: t, url: q.URL}
			if v := s.waitVersion(func(v string) bool { return v != before }); v == before {
				t.Fatalf("the edited file is not in force after a %s: %s\n%s", tc.name, v, q.Logs())
			}
			if n := allowedCalls(t, q.URL, 10); n != 3 {
				t.Fatalf("a new user got %d calls, want the edited limit 3", n)
			}
		})
	}
}

// Three instances on one store, each with its own copy of the rules file:
// a rollout (each file edited, each instance restarted in turn) puts the
// new rules in force on all three; then one instance restarted with the
// old file keeps the fleet on the new rules, with a warning saying why.
func TestRulesFile_ARolloutReachesTheFleetAndAStaleFileDoesNotRollItBack(t *testing.T) {
	t.Parallel()
	env := fleetEnv()
	var fleet []*testenv.Quotad
	var paths []string
	for range 3 {
		p := writeFile(t, t.TempDir(), "rules.yaml", perUser("2"))
		paths = append(paths, p)
		fleet = append(fleet, testenv.StartQuotad(t, append(env, "QUOTA_RULES="+p)...))
	}
	old := versionAt(t, fleet[0].URL)
	for i, q := range fleet {
		writeFile(t, filepath.Dir(paths[i]), "rules.yaml", perUser("3"))
		restart(t, q)
	}
	newV := versionAt(t, fleet[0].URL)
	if newV == old {
		t.Fatalf("the rollout did not change the rules: %s\n%s", newV, fleet[0].Logs())
	}
	for i, q := range fleet {
		if v := (&server{t: t, url: q.URL}).waitVersion(func(v string) bool { return v == newV }); v != newV {
			t.Fatalf("instance %d on %s after the rollout, want %s", i, v, newV)
		}
	}

	writeFile(t, filepath.Dir(paths[1]), "rules.yaml", perUser("2")) // a stale copy
	restart(t, fleet[1])
	time.Sleep(600 * time.Millisecond) // three polls of the others
	for i, q := range fleet {
		if v := versionAt(t, q.URL); v != newV {
			t.Errorf("instance %d on %s after a restart with the old file, want the fleet's %s", i, v, newV)
		}
	}
	if n := allowedCalls(t, fleet[1].URL, 10); n != 3 {
		t.Errorf("a new user on the restarted instance got %d calls, want the fleet's limit 3", n)
	}
	if logs := fleet[1].Logs(); !strings.Contains(logs, `"level":"WARN","msg":"the rules file lost to the shared store`) {
		t.Errorf("no warning that the stale file lost:\n%s", logs)
	}
}

// The newcomer's setup: quotad run from the checkout with the default
// QUOTA_RULES (deploy/rules.yaml). A PUT changes the rules in force and
// writes no file in the module's tree; with QUOTA_RULES_STATE set, it is
// kept there (outside the tree) instead.
func TestRulesFile_PutWritesNoFileInTheModuleTree(t *testing.T) {
	t.Parallel()
	root := testenv.ModuleRoot(t)
	shipped, err := os.ReadFile(filepath.Join(root, "deploy", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "rules-state.yaml")
	for _, tc := range []struct{ name, store, state string }{
		{"shared store, no state", "redis", ""},
		{"shared store, state outside the tree", "redis", state},
		{"file store", "file", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := testenv.StartQuotad(t, fleetEnv("QUOTA_RULES_STORE="+tc.store, "QUOTA_RULES_STATE="+tc.state)...)
			rule := "put_" + testenv.RandomHex(6)
			code, v := putRules(t, q.URL, `{"rules":[{"name":"`+rule+`","dimensions":["user_id"],"limit":3,"window":"1h","algorithm":"fixed_window"}]}`)
			if code != http.StatusOK {
				t.Fatalf("PUT: %d %s", code, v)
			}
			if got := versionAt(t, q.URL); got != v {
				t.Fatalf("in force %s, want the PUT's %s", got, v)
			}
			if err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if d.IsDir() && d.Name() == ".git" {
					return filepath.SkipDir
				}
				if fi, err := d.Info(); err != nil || d.IsDir() || fi.Size() > 1<<20 {
					return nil
				}
				if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(rule)) {
					t.Errorf("the PUT's rules were written into the module tree: %s", p)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(filepath.Join(root, "deploy", "rules.yaml")); !bytes.Equal(got, shipped) {
				t.Errorf("deploy/rules.yaml changed:\n%s", got)
			}
			if tc.state != "" {
				if b, err := os.ReadFile(tc.state); err != nil || !bytes.Contains(b, []byte(rule)) {
					t.Errorf("QUOTA_RULES_STATE does not keep the PUT's rules: %v\n%s", err, b)
				}
			}
		})
	}
}

// With QUOTA_RULES_STORE=file the rules kept in QUOTA_RULES_STATE survive
// a restart while the rules file is unchanged; an edit of the file wins at
// the next restart.
func TestRulesState_FileStoreKeepsPutRulesUntilTheFileIsEdited(t *testing.T) {
	t.Parallel()
	path := writeFile(t, t.TempDir(), "rules.yaml", perUser("2"))
	state := filepath.Join(t.TempDir(), "rules-state.yaml")
	q := testenv.StartQuotad(t, fleetEnv("QUOTA_RULES="+path, "QUOTA_RULES_STORE=file", "QUOTA_RULES_STATE="+state)...)
	code, put := putRules(t, q.URL, `{"rules":[{"name":"per_user","dimensions":["user_id"],"limit":4,"window":"1h","algorithm":"fixed_window"}]}`)
	if code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, put)
	}
	restart(t, q)
	if v := versionAt(t, q.URL); v != put {
		t.Fatalf("after a restart with the file unchanged: %s, want the PUT's %s\n%s", v, put, q.Logs())
	}
	writeFile(t, filepath.Dir(path), "rules.yaml", perUser("5"))
	restart(t, q)
	if v := versionAt(t, q.URL); v == put {
		t.Fatalf("after the file was edited the PUT's rules are still in force")
	}
	if n := allowedCalls(t, q.URL, 10); n != 5 {
		t.Fatalf("a new user got %d calls, want the edited file's limit 5", n)
	}
}
