// Package deploy holds what an operator deploys (no Go code); its tests
// check those files with the tools this machine has or can install
// (make test installs them: internal/testsupport/testenv/ensure-tool.sh).
package deploy

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// tool is the path of a command-line tool; without it the test fails,
// saying how to get it (make test installs it first).
func tool(t *testing.T, name string) string {
	t.Helper()
	return testenv.RequireTool(t, name)
}

// run runs a command in dir and returns its combined output, failing the
// test on a non-zero exit.
func run(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSystemdUnit_VerifiesAndIsHardened(t *testing.T) {
	t.Parallel()
	analyze := tool(t, "systemd-analyze")
	unit := string(readFile(t, "systemd/quotad.service"))
	// verify checks that ExecStart is executable: point it at a real quotad.
	bin := testenv.Binary(t, "quotad")
	dir := t.TempDir()
	path := filepath.Join(dir, "quotad.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(unit, "/usr/local/bin/quotad", bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	// Unknown keys and bad values are warnings with exit status 0: any
	// output is a failure.
	if out := run(t, dir, analyze, "verify", path); strings.TrimSpace(out) != "" {
		t.Fatalf("systemd-analyze verify: %s", out)
	}
	// Exposure 0 (locked down) to 10 (unprotected); threshold is x10.
	run(t, dir, analyze, "security", "--offline=yes", "--threshold=20", path)

	for _, want := range []string{
		"User=quota", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
		"EnvironmentFile=/etc/quota/quotad.env", "Restart=on-failure", "LimitNOFILE=", "ExecReload=/bin/kill -HUP $MAINPID",
		"TimeoutStopSec=90s", "ExecStart=/usr/local/bin/quotad serve",
	} {
		if !strings.Contains(unit, "\n"+want) {
			t.Errorf("quotad.service lacks %q", want)
		}
	}
	// The example environment file names only settings quotad reads, and
	// quotad starts its configuration with them.
	env := string(readFile(t, "systemd/quotad.env.example"))
	var kv []string
	for _, line := range strings.Split(env, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			kv = append(kv, line)
		}
	}
	rules, _ := filepath.Abs("rules.yaml")
	cmd := exec.Command(bin, "serve")
	// stops at listen: config was accepted. QUOTA_SCHEMA_ON_START=off: the
	// shards the example names (quota_0, quota_1 on this machine's MariaDB)
	// need not hold the schema for that; `make test` does not migrate them.
	cmd.Env = append(kv, "QUOTA_RULES="+rules, "QUOTA_LISTEN=256.0.0.1:1", "QUOTA_SCHEMA_ON_START=off")
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "listen 256.0.0.1:1") {
		t.Fatalf("quotad with quotad.env.example: %s", out)
	}
}

func TestComposeFile_Validates(t *testing.T) {
	t.Parallel()
	dc := tool(t, "docker-compose")
	// docker-compose checks the file against the Compose schema, resolves
	// the variables and the paths it mounts, with no Docker engine.
	out := run(t, ".", dc, "-f", "compose.yaml", "config")
	for _, svc := range []string{"redis:", "mariadb:", "quotad:", "prometheus:", "grafana:"} {
		if !strings.Contains(out, "\n  "+svc+"\n") {
			t.Errorf("compose config lacks service %s", svc)
		}
	}
	// Every file the compose file mounts exists.
	for _, f := range []string{"redis.conf", "mariadb/quota.cnf", "mariadb/init.sql", "prometheus/prometheus.yml",
		"prometheus/alerts.yaml", "grafana/provisioning", "grafana/quota-dashboard.json", "Dockerfile"} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("compose.yaml mounts %s: %v", f, err)
		}
	}
}

func TestPrometheusRules_PromtoolChecksAndUnitTests(t *testing.T) {
	t.Parallel()
	promtool := tool(t, "promtool")
	run(t, "prometheus", promtool, "check", "rules", "alerts.yaml")
	out := run(t, "prometheus", promtool, "test", "rules", "alerts_test.yaml")
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules: %s", out)
	}
	// prometheus.yml names the rules where the compose file mounts them.
	dir := t.TempDir()
	cfg := bytes.ReplaceAll(readFile(t, "prometheus/prometheus.yml"), []byte("/etc/prometheus/alerts.yaml"), []byte("alerts.yaml"))
	for name, b := range map[string][]byte{"prometheus.yml": cfg, "alerts.yaml": readFile(t, "prometheus/alerts.yaml")} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(t, dir, promtool, "check", "config", "prometheus.yml")
}

func TestDockerfile_StaticNonRootWithHealthcheck(t *testing.T) {
	t.Parallel()
	df := string(readFile(t, "Dockerfile"))
	gomod := string(readFile(t, "../go.mod"))
	var goVer string
	for _, l := range strings.Split(gomod, "\n") {
		if v, ok := strings.CutPrefix(l, "go "); ok {
			goVer = v
		}
	}
	parts := strings.Split(goVer, ".")
	if len(parts) < 2 {
		t.Fatalf("go.mod go directive %q", goVer)
	}
	for _, want := range []string{
		"FROM golang:" + parts[0] + "." + parts[1] + "-", // the builder's Go is go.mod's
		"CGO_ENABLED=0",
		"FROM gcr.io/distroless/static-debian12:nonroot",
		"USER 65532:65532",
		`CMD ["/usr/local/bin/quotad", "healthcheck"]`,
		"internal/version.Version=${VERSION}",
		`ENTRYPOINT ["/usr/local/bin/quotad"]`,
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if _, err := os.Stat("../.dockerignore"); err != nil {
		t.Errorf(".dockerignore: %v", err)
	}
}
