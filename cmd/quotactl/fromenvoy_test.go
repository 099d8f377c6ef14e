package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/quota-platform/quota/rules"
)

// The platform's limits written for envoy ratelimit translate back to
// deploy/rules.yaml exactly, with nothing to report but the model note.
func TestRulesFromEnvoy_PlatformConfigGivesTheDeployRules(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"rules", "from-envoy", "../../deploy/envoy/ratelimit.yaml"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	got, err := rules.ParseYAML(stdout.Bytes())
	if err != nil {
		t.Fatalf("output is not a rules file: %v\n%s", err, stdout.String())
	}
	want, err := rules.ReadFile("../../deploy/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != want.Version {
		t.Fatalf("rules differ from deploy/rules.yaml:\n%s", stdout.String())
	}
	if n := strings.Count(stderr.String(), "note:"); n != 1 {
		t.Fatalf("want only the model note, got:\n%s", stderr.String())
	}
}

func TestRulesFromEnvoy_SaysWhatCannotBeExpressed(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"rules", "from-envoy", "../../envoyconf/testdata/example.yaml"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	set, err := rules.ParseYAML(stdout.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range set.Rules {
		names = append(names, r.Name)
	}
	for _, want := range []string{"rl_foo", "rl_foo_bar", "rl_foo_baz_shady"} {
		if !slices.Contains(names, want) {
			t.Errorf("no rule %s in %v", want, names)
		}
	}
	for _, want := range []string{
		"rl: foo, bar=banned: requests_per_unit 0",
		"rl: foo, bay: unlimited",
		"rl: foo, bar: key-only limit with value-specific siblings",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}

func TestRulesFromEnvoy_InvalidConfigExits1(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(p, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"rules", "from-envoy", p}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "invalid rate limit unit 'fortnight'") || stdout.Len() != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}
