// Package quota_test holds the house rules of the tree, checked against
// `go list` so that a move or a new package that breaks them turns
// `make test` red:
//
//   - TestProductionDoesNotImportTestSupport: no package outside
//     internal/testsupport/ imports internal/testsupport/... from a non-test
//     file (test harnesses import production code, never the other way).
//   - TestArchitectureDocNamesEveryPackage: docs/architecture.md's package
//     map names every package of the module, and nothing else
//     (TestDocPackages_ReadsOnlyThePackageMapsFirstColumn: how it is read).
package quota_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/quota-platform/quota"

// testSupport is where the tests' harnesses live; production code must not
// depend on anything under it.
const testSupport = module + "/internal/testsupport"

// listedPackage is what `go list -json` says of a package that these rules
// use.
type listedPackage struct {
	ImportPath string
	Imports    []string // direct imports of its non-test files
}

// goList runs `go list -json` with the build tags given over the module's
// packages.
func goList(t *testing.T, tags string) []listedPackage {
	t.Helper()
	args := []string{"list", "-json=ImportPath,Imports"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	args = append(args, "./...")
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list ./... listed no packages")
	}
	return pkgs
}

// underPath reports whether import path p is path or below it.
func underPath(p, path string) bool {
	return p == path || strings.HasPrefix(p, path+"/")
}

func TestProductionDoesNotImportTestSupport(t *testing.T) {
	tests := []struct {
		name string
		tags string // build tags: production files behind a tag count too
	}{
		{name: "default build", tags: ""},
		{name: "fault-injection tags", tags: "faults partitions fleet"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range goList(t, tc.tags) {
				if underPath(p.ImportPath, testSupport) {
					continue // harnesses may use each other
				}
				// Direct imports suffice: any chain from production code
				// into test support starts with a production package
				// importing it directly.
				for _, d := range p.Imports {
					if underPath(d, testSupport) {
						t.Errorf("%s imports %s from a non-test file: production code must not "+
							"import internal/testsupport/...; move the import into a _test.go file "+
							"or the helper out of testsupport", p.ImportPath, d)
					}
				}
			}
		})
	}
}

// The package map is the table under the heading mapHeading in
// docs/architecture.md whose first column is "package". Its first column
// names packages, each as a backticked path relative to the module root
// (`tiers`, `bench/cmd/quotasoak`, `.` for the module root itself), several
// to a row if they share a job; nothing else is backticked in that column.
//
// The rule: every package `go list ./...` prints (default build tags) is
// named there, binaries and benchmark tooling included, and every path
// named there is such a package. No exceptions, so a newcomer can trust the
// map to be the whole tree.
const (
	architectureDoc = "docs/architecture.md"
	mapHeading      = "## Packages"
)

// docPackages reads the package map's paths from the doc.
func docPackages(t *testing.T, doc []byte) []string {
	t.Helper()
	var (
		names     []string
		inSection bool
		inTable   bool
	)
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "## "):
			inSection = strings.HasPrefix(line, mapHeading)
			inTable = false
		case !inSection:
		case strings.HasPrefix(line, "| package |"):
			inTable = true
		case inTable && strings.HasPrefix(line, "|"):
			cells := strings.Split(line, "|")
			if len(cells) < 3 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
				continue
			}
			first := cells[1]
			for {
				i := strings.IndexByte(first, '`')
				if i < 0 {
					break
				}
				j := strings.IndexByte(first[i+1:], '`')
				if j < 0 {
					t.Fatalf("%s: unbalanced backtick in package map row %q", architectureDoc, line)
				}
				names = append(names, first[i+1:i+1+j])
				first = first[i+1+j+1:]
			}
		case inTable:
			inTable = false
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s: no package map found (a table with a first column \"package\" under %q)", architectureDoc, mapHeading)
	}
	return names
}

func TestArchitectureDocNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile(architectureDoc)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, p := range goList(t, "") {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if rel == "" {
			rel = "."
		}
		listed = append(listed, rel)
	}
	named := docPackages(t, doc)

	var missing, extra, twice []string
	seen := map[string]bool{}
	for _, n := range named {
		if seen[n] {
			twice = append(twice, n)
		}
		seen[n] = true
		if !slices.Contains(listed, n) {
			extra = append(extra, n)
		}
	}
	for _, l := range listed {
		if !seen[l] {
			missing = append(missing, l)
		}
	}
	for _, c := range []struct {
		what  string
		paths []string
	}{
		{"packages missing from the map (add each to a row)", missing},
		{"paths in the map that `go list ./...` does not list (remove or correct them)", extra},
		{"paths named twice in the map", twice},
	} {
		if len(c.paths) > 0 {
			slices.Sort(c.paths)
			t.Errorf("%s, table under %q: %s:\n\t%s", architectureDoc, mapHeading, c.what, strings.Join(c.paths, "\n\t"))
		}
	}
}

func TestDocPackages_ReadsOnlyThePackageMapsFirstColumn(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{
			name: "one and several to a row",
			doc: "# A\n\n## Packages, and more\n\ntext `not/this`\n\n| package | job |\n| --- | --- |\n" +
				"| `api` | the `edges` |\n| `client`, `client/httpmw` | client |\n| `.` | tests |\n\nafter `nor/this`\n",
			want: []string{"api", "client", "client/httpmw", "."},
		},
		{
			name: "a table in another section is not the map",
			doc: "## Other\n\n| package | job |\n| --- | --- |\n| `old` | x |\n\n" +
				"## Packages\n\n| package | job |\n| --- | --- |\n| `new` | y |\n",
			want: []string{"new"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := docPackages(t, []byte(tc.doc)); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
