package main_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// quotad built the way `make build` / `make release` stamp it.
func TestVersion_StampedBuildPrintsAndExportsIt(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "quotad")
	ld := "-X github.com/quota-platform/quota/internal/version.Version=v9.8.7-test " +
		"-X github.com/quota-platform/quota/internal/version.Revision=0123456789ab"
	if out, err := exec.Command("go", "build", "-ldflags", ld, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "quotad v9.8.7-test (revision 0123456789ab, " + runtime.Version() + ")\n"; string(out) != want {
		t.Fatalf("quotad version = %q, want %q", out, want)
	}

	s := startServerBinary(t, bin, writeFile(t, t.TempDir(), "rules.yaml", validRules))
	want := `quota_build_info{goversion="` + runtime.Version() + `",revision="0123456789ab",version="v9.8.7-test"} 1`
	if m := s.metrics(); !strings.Contains(m, want) {
		t.Fatalf("/metrics lacks %s", want)
	}
}

func TestVersion_UnstampedBuildSaysDevel(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(quotadBin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^quotad \S+ \(revision \S+, go[0-9.]+\S*\)\n$`).Match(out) {
		t.Fatalf("quotad version = %q", out)
	}
}

func TestHealthcheck_ExitsZeroOnlyWhenHealthzAnswers200(t *testing.T) {
	t.Parallel()
	s := startServer(t, writeFile(t, t.TempDir(), "rules.yaml", validRules))
	listen := strings.TrimPrefix(s.url, "http://")
	cases := []struct {
		name    string
		args    []string
		env     []string
		wantErr string // "" = exit 0
	}{
		{"QUOTA_LISTEN of a running quotad", nil, []string{"QUOTA_LISTEN=" + listen}, ""},
		{"an explicit URL", []string{s.url + "/healthz"}, nil, ""},
		{"a route that is not 200", []string{s.url + "/nope"}, nil, "404"},
		{"nothing listening", []string{"http://127.0.0.1:1/healthz"}, nil, "connection refused"},
		{"bad QUOTA_LISTEN", nil, []string{"QUOTA_LISTEN=nohost"}, "QUOTA_LISTEN"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, quotadBin, append([]string{"healthcheck"}, tc.args...)...)
			cmd.Env = append(environWithoutQuota(), tc.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("exit %v: %s", err, stderr.String())
				}
				return
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			if err == nil || len(lines) != 1 || !strings.Contains(lines[0], tc.wantErr) {
				t.Fatalf("exit %v, stderr %q: want a failure naming %q in one line", err, stderr.String(), tc.wantErr)
			}
		})
	}
}

func TestLogLevel_FiltersStartupLines(t *testing.T) {
	t.Parallel()
	rules := writeFile(t, t.TempDir(), "rules.yaml", validRules)
	for _, tc := range []struct {
		level     string
		listening bool // the info line "quotad listening"
	}{{"", true}, {"debug", true}, {"warn", false}, {"error", false}} {
		t.Run("level="+tc.level, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, rules, "QUOTA_LOG_LEVEL="+tc.level)
			// The line is written before /healthz can answer.
			if got := strings.Contains(s.logs.String(), `"msg":"quotad listening"`); got != tc.listening {
				t.Fatalf("QUOTA_LOG_LEVEL=%q: listening line logged %v, want %v; logs: %s", tc.level, got, tc.listening, s.logs)
			}
		})
	}
	cmd := exec.Command(quotadBin, "serve")
	cmd.Env = append(environWithoutQuota(), "QUOTA_LOG_LEVEL=trace", "QUOTA_RULES="+rules)
	out, err := cmd.CombinedOutput()
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); err == nil || len(lines) != 1 || !strings.Contains(lines[0], "QUOTA_LOG_LEVEL") {
		t.Fatalf("QUOTA_LOG_LEVEL=trace: exit %v, output %q; want one line naming QUOTA_LOG_LEVEL", err, out)
	}
}

func (s *server) metrics() string {
	s.t.Helper()
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
