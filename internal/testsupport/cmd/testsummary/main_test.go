package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// goTestJSON writes a module of the given test files (path -> source) to a
// temporary directory and returns what `go test -json ./...` prints there.
func goTestJSON(t *testing.T, files map[string]string) []byte {
	t.Helper()
	dir := t.TempDir()
	files["go.mod"] = "module example.com/fixture\n\ngo 1.22\n"
	for name, src := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-count=1", "-json", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, _ := cmd.CombinedOutput() // fails whenever a fixture test fails
	if !bytes.Contains(out, []byte(`"Action"`)) {
		t.Fatalf("go test -json printed no events:\n%s", out)
	}
	return out
}

// The skip cases read go test -json as it printed them for a fixture
// module (testdata/skip_*.json, recorded with go1.26): TestOne passes and
// TestTool skips "frobnicator not installed" at a_test.go:4; TestTool/x
// skips "later" at a_test.go:3. A fixture whose test skips would be a
// skip in this tree's own sources.
func TestSummarize(t *testing.T) {
	tests := []struct {
		name       string
		files      map[string]string
		recorded   string // instead of files: a go test -json stream in testdata
		failOnSkip bool
		wantOK     bool
		want       []string // lines or parts of lines the summary must hold
		notWant    []string
	}{
		{
			name: "all pass",
			files: map[string]string{
				"a/a_test.go": "package a\nimport \"testing\"\nfunc TestOne(t *testing.T) { t.Log(\"quiet\") }\n" +
					"func TestTwo(t *testing.T) { t.Run(\"sub\", func(t *testing.T) {}) }\n",
				"b/b.go": "package b\n",
			},
			failOnSkip: true,
			wantOK:     true,
			want: []string{"ok  \texample.com/fixture/a",
				"tests: 3 passed, 0 failed, 0 skipped; packages: 1 ok, 0 failed, 1 without tests",
				"skipped: 0", "PASS"},
			notWant: []string{"quiet", "=== RUN"},
		},
		{
			name:     "a skip passes without -fail-on-skip, listed with its reason",
			recorded: "testdata/skip_reason.json",
			wantOK:   true,
			want: []string{"skipped tests (1):",
				"example.com/fixture/a TestTool: a_test.go:4: frobnicator not installed",
				"tests: 1 passed, 0 failed, 1 skipped", "skipped: 1", "PASS"},
		},
		{
			name:       "a skip fails with -fail-on-skip",
			recorded:   "testdata/skip_subtest.json",
			failOnSkip: true,
			wantOK:     false,
			want:       []string{"example.com/fixture/a TestTool/x: a_test.go:3: later", "skipped: 1", "FAIL: 1 skipped tests with -fail-on-skip"},
		},
		{
			name: "a failed subtest's output and name, not its silent parent's",
			files: map[string]string{
				"a/a_test.go": "package a\nimport \"testing\"\n" +
					"func TestParent(t *testing.T) { t.Run(\"child\", func(t *testing.T) { t.Error(\"boom\\nsecond line\") }) }\n" +
					"func TestFine(t *testing.T) {}\n",
			},
			wantOK: false,
			want: []string{"FAIL\texample.com/fixture/a", "=== FAIL example.com/fixture/a TestParent/child",
				"a_test.go:3: boom", "second line", "failed (2):", "    example.com/fixture/a TestParent/child",
				"tests: 1 passed, 2 failed, 0 skipped", "\nFAIL\n"},
			notWant: []string{"=== FAIL example.com/fixture/a TestParent\n"},
		},
		{
			name: "a build failure shows the compiler's message at the end",
			files: map[string]string{
				"a/a_test.go": "package a\nimport \"testing\"\nfunc TestX(t *testing.T) { var x int = \"s\"; _ = x }\n",
			},
			wantOK: false,
			want: []string{"FAIL\texample.com/fixture/a [build failed]", "=== FAIL package example.com/fixture/a (outside any test)",
				"cannot use \"s\"", "example.com/fixture/a (package)"},
		},
		{
			name: "a panic fails the test it ran under",
			files: map[string]string{
				"a/a_test.go": "package a\nimport \"testing\"\nfunc TestPanics(t *testing.T) { panic(\"kaboom\") }\n",
			},
			wantOK: false,
			want:   []string{"=== FAIL example.com/fixture/a TestPanics", "panic: kaboom", "failed (1):"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var in []byte
			if tc.recorded != "" {
				var err error
				if in, err = os.ReadFile(tc.recorded); err != nil {
					t.Fatal(err)
				}
			} else {
				in = goTestJSON(t, tc.files)
			}
			var out bytes.Buffer
			ok, err := summarize(bytes.NewReader(in), &out, tc.failOnSkip)
			if err != nil {
				t.Fatal(err)
			}
			got := out.String()
			if ok != tc.wantOK {
				t.Errorf("passed = %v, want %v", ok, tc.wantOK)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("summary lacks %q", w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(got, w) {
					t.Errorf("summary holds %q", w)
				}
			}
			if t.Failed() {
				t.Logf("summary:\n%s", got)
			}
		})
	}
}

// Lines that are not test events (go: downloading …) pass through.
func TestSummarize_PassesOtherLinesThrough(t *testing.T) {
	in := "go: downloading example.com/x v1.0.0\n" +
		`{"Action":"start","Package":"p"}` + "\n" +
		`{"Action":"run","Package":"p","Test":"TestA"}` + "\n" +
		`{"Action":"pass","Package":"p","Test":"TestA"}` + "\n" +
		`{"Action":"pass","Package":"p","Elapsed":0.5}` + "\n"
	var out bytes.Buffer
	ok, err := summarize(strings.NewReader(in), &out, true)
	if err != nil || !ok {
		t.Fatalf("ok %v err %v\n%s", ok, err, out.String())
	}
	for _, w := range []string{"go: downloading example.com/x v1.0.0\n", "ok  \tp\t0.5s\n", "tests: 1 passed, 0 failed, 0 skipped"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("summary lacks %q:\n%s", w, out.String())
		}
	}
}
