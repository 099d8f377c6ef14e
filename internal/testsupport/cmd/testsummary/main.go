// Command testsummary reads `go test -json` on stdin and prints what a
// person reading a test log needs, in the order a CI log is read (its last
// lines first):
//
//   - as each package ends, "ok" or "FAIL" and the package, as go test does,
//     and a failed build's compiler output;
//   - once all is done, the output of every failed test (and of a package
//     that failed outside any test: a panic, a timeout), then each skipped
//     test with its reason, then the failed tests' names, then one line of
//     counts ("tests: 1203 passed, 0 failed, 0 skipped; …") and "skipped: N".
//
// Lines that are not JSON (go: downloading …) are passed through. It exits 1
// when a test, a package or a build failed, or with -fail-on-skip when any
// test was skipped (make test sets it under CI=true: CI runs every test).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	ImportPath  string // build-output, build-fail
	FailedBuild string // a package's fail after a failed build
}

// result is one test that ended, or one package that failed outside its
// tests, with the output worth showing.
type result struct {
	pkg, test string
	output    []string
}

// summary is the state of one summarizing pass.
type summary struct {
	w io.Writer

	outputs   map[string][]string // test key -> output lines so far
	running   map[string]string   // test key -> package, for tests begun but not ended
	pkgOutput map[string][]string // package -> output outside tests
	builds    map[string][]string // import path -> build output (kept for the end)

	passed            int
	failed, skipped   []result
	failedPkgs        []result // packages that failed with no failed test of theirs
	pkgOK, pkgNoTests int
	pkgFailed         int
	failedTestsInPkg  map[string]int
}

func newSummary(w io.Writer) *summary {
	return &summary{
		w:                w,
		outputs:          map[string][]string{},
		running:          map[string]string{},
		pkgOutput:        map[string][]string{},
		builds:           map[string][]string{},
		failedTestsInPkg: map[string]int{},
	}
}

func key(pkg, test string) string { return pkg + "\x00" + test }

// line handles one line of input.
func (s *summary) line(l string) {
	var e event
	if !strings.HasPrefix(l, "{") || json.Unmarshal([]byte(l), &e) != nil || e.Action == "" {
		fmt.Fprintln(s.w, l)
		return
	}
	switch {
	case e.Action == "build-output":
		s.builds[e.ImportPath] = append(s.builds[e.ImportPath], strings.TrimSuffix(e.Output, "\n"))
	case e.Action == "build-fail":
		for _, o := range s.builds[e.ImportPath] {
			fmt.Fprintln(s.w, o)
		}
	case e.Test != "":
		s.testEvent(e)
	default:
		s.packageEvent(e)
	}
}

func (s *summary) testEvent(e event) {
	k := key(e.Package, e.Test)
	switch e.Action {
	case "run":
		s.running[k] = e.Package
		s.outputs[k] = nil
	case "output":
		s.outputs[k] = append(s.outputs[k], strings.TrimSuffix(e.Output, "\n"))
	case "pass":
		s.passed++
		s.end(k)
	case "skip":
		s.skipped = append(s.skipped, result{e.Package, e.Test, s.outputs[k]})
		s.end(k)
	case "fail":
		s.failed = append(s.failed, result{e.Package, e.Test, s.outputs[k]})
		s.failedTestsInPkg[e.Package]++
		s.end(k)
	}
}

func (s *summary) end(k string) {
	delete(s.outputs, k)
	delete(s.running, k)
}

func (s *summary) packageEvent(e event) {
	switch e.Action {
	case "output":
		s.pkgOutput[e.Package] = append(s.pkgOutput[e.Package], strings.TrimSuffix(e.Output, "\n"))
	case "pass":
		s.pkgOK++
		fmt.Fprintf(s.w, "ok  \t%s\t%.1fs\n", e.Package, e.Elapsed)
		delete(s.pkgOutput, e.Package)
	case "skip": // no test files
		s.pkgNoTests++
		delete(s.pkgOutput, e.Package)
	case "fail":
		s.pkgFailed++
		s.finishPackage(e)
	}
}

// finishPackage reports a failed package: tests it began and never ended
// (the binary died under them) fail, and so does the package itself when
// no test of its failed, with its own output.
func (s *summary) finishPackage(e event) {
	var unfinished []string
	for k, pkg := range s.running {
		if pkg == e.Package {
			unfinished = append(unfinished, k)
		}
	}
	slices.Sort(unfinished)
	for _, k := range unfinished {
		test := strings.SplitN(k, "\x00", 2)[1]
		s.failed = append(s.failed, result{e.Package, test, append(s.outputs[k], "(did not finish: the test binary ended under it)")})
		s.failedTestsInPkg[e.Package]++
		s.end(k)
	}
	what := ""
	if e.FailedBuild != "" {
		what = " [build failed]"
	}
	fmt.Fprintf(s.w, "FAIL\t%s%s\t%.1fs\n", e.Package, what, e.Elapsed)
	if s.failedTestsInPkg[e.Package] == 0 {
		var out []string
		for _, o := range s.pkgOutput[e.Package] {
			if t := strings.TrimSpace(o); t != "FAIL" && t != "PASS" && !strings.HasPrefix(t, "FAIL\t"+e.Package) {
				out = append(out, o)
			}
		}
		if e.FailedBuild != "" {
			out = append(out, s.builds[e.FailedBuild]...)
		}
		s.failedPkgs = append(s.failedPkgs, result{pkg: e.Package, output: out})
	}
	delete(s.pkgOutput, e.Package)
}

// shown is a test's output without go test's progress lines.
func shown(out []string) []string {
	var keep []string
	for _, o := range out {
		if strings.HasPrefix(o, "=== RUN") || strings.HasPrefix(o, "=== PAUSE") || strings.HasPrefix(o, "=== CONT") || strings.HasPrefix(o, "=== NAME") {
			continue
		}
		keep = append(keep, o)
	}
	return keep
}

// skipReason is a skipped test's message on one line.
func skipReason(out []string) string {
	var parts []string
	for _, o := range shown(out) {
		if t := strings.TrimSpace(o); t != "" && !strings.HasPrefix(t, "--- SKIP") {
			parts = append(parts, t)
		}
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " / ")
}

// hasFailedChild reports whether a failed test of pkg is below test.
func (s *summary) hasFailedChild(r result) bool {
	for _, f := range s.failed {
		if f.pkg == r.pkg && strings.HasPrefix(f.test, r.test+"/") {
			return true
		}
	}
	return false
}

// report prints the summary and reports whether the run passed.
func (s *summary) report(failOnSkip bool) bool {
	w := s.w
	byName := func(a, b result) int { return strings.Compare(a.pkg+" "+a.test, b.pkg+" "+b.test) }
	slices.SortFunc(s.failed, byName)
	slices.SortFunc(s.skipped, byName)
	slices.SortFunc(s.failedPkgs, byName)

	for _, p := range s.failedPkgs {
		fmt.Fprintf(w, "\n=== FAIL package %s (outside any test)\n", p.pkg)
		for _, o := range p.output {
			fmt.Fprintln(w, o)
		}
	}
	for _, f := range s.failed {
		out := shown(f.output)
		// A parent that failed only through its subtests says nothing
		// more than its "--- FAIL" line: the subtests' output is shown.
		if len(out) <= 1 && s.hasFailedChild(f) {
			continue
		}
		fmt.Fprintf(w, "\n=== FAIL %s %s\n", f.pkg, f.test)
		for _, o := range out {
			fmt.Fprintln(w, o)
		}
	}

	fmt.Fprintln(w)
	if len(s.skipped) > 0 {
		fmt.Fprintf(w, "skipped tests (%d):\n", len(s.skipped))
		for _, r := range s.skipped {
			fmt.Fprintf(w, "    %s %s: %s\n", r.pkg, r.test, skipReason(r.output))
		}
	}
	if n := len(s.failed) + len(s.failedPkgs); n > 0 {
		fmt.Fprintf(w, "failed (%d):\n", n)
		for _, p := range s.failedPkgs {
			fmt.Fprintf(w, "    %s (package)\n", p.pkg)
		}
		for _, f := range s.failed {
			fmt.Fprintf(w, "    %s %s\n", f.pkg, f.test)
		}
	}
	fmt.Fprintf(w, "tests: %d passed, %d failed, %d skipped; packages: %d ok, %d failed, %d without tests\n",
		s.passed, len(s.failed), len(s.skipped), s.pkgOK, s.pkgFailed, s.pkgNoTests)
	fmt.Fprintf(w, "skipped: %d\n", len(s.skipped))

	ok := len(s.failed) == 0 && s.pkgFailed == 0 && len(s.failedPkgs) == 0
	if failOnSkip && len(s.skipped) > 0 {
		fmt.Fprintf(w, "FAIL: %d skipped tests with -fail-on-skip (CI=true): CI must run every test; make each one run or fail\n", len(s.skipped))
		ok = false
	}
	if !ok {
		fmt.Fprintln(w, "FAIL")
	} else {
		fmt.Fprintln(w, "PASS")
	}
	return ok
}

// summarize reads go test -json from r, prints to w, and reports whether
// the run passed.
func summarize(r io.Reader, w io.Writer, failOnSkip bool) (bool, error) {
	s := newSummary(w)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		s.line(sc.Text())
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	// Tests still running when the input ended: go test itself died.
	for k, pkg := range s.running {
		s.failed = append(s.failed, result{pkg, strings.SplitN(k, "\x00", 2)[1], append(s.outputs[k], "(did not finish: the input ended)")})
	}
	return s.report(failOnSkip), nil
}

func main() {
	failOnSkip := flag.Bool("fail-on-skip", false, "exit 1 when any test was skipped")
	flag.Parse()
	ok, err := summarize(os.Stdin, os.Stdout, *failOnSkip)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}
