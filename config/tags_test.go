package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Every field of Settings is a variable (env tag) with a help line, or is
// derived by Load and says so with env:"-".
func TestSettings_EveryFieldIsDeclaredInItsTags(t *testing.T) {
	t.Parallel()
	var walk func(reflect.Type)
	walk = func(typ reflect.Type) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				walk(f.Type)
				continue
			}
			name, ok := f.Tag.Lookup("env")
			switch {
			case !ok || name == "":
				t.Errorf("%s has no env tag", f.Name)
			case name != "-" && !strings.HasPrefix(name, "QUOTA_"):
				t.Errorf("%s: variable %s does not start with QUOTA_", f.Name, name)
			case name != "-" && f.Tag.Get("help") == "":
				t.Errorf("%s (%s) has no help tag", f.Name, name)
			}
		}
	}
	walk(reflect.TypeFor[Settings]())
	seen := map[string]string{}
	for field, name := range envNames() {
		if other, dup := seen[name]; dup {
			t.Errorf("%s is read by both %s and %s", name, field, other)
		}
		seen[name] = field
	}
}

// Each default parses and passes its own bounds, and the default of
// QUOTA_AUTH_HEADERS is the exported constant.
func TestDefaults_ParseAndValidate(t *testing.T) {
	t.Parallel()
	d := Defaults()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	want, err := ParseAuthHeaders(DefaultAuthHeaders)
	if err != nil || !reflect.DeepEqual(d.AuthHeaders, want) {
		t.Fatalf("default auth headers %v, want %v (%v)", d.AuthHeaders, want, err)
	}
}

// No setting goes undocumented: each variable is named in README.md or in
// docs/ (README's table lists the main ones; docs/operations.md, analytics.md
// and tiers.md the rest). There is no single list of every variable today.
func TestSettings_EveryVariableIsDocumented(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var docs strings.Builder
	for _, f := range append(files, "../README.md") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(b)
	}
	// QUOTA_NEW_TIER accepts only its default (hot) and exists so that an
	// old deployment setting warm or cold fails clearly.
	undocumented := map[string]bool{"QUOTA_NEW_TIER": true}
	text := docs.String()
	for _, name := range envNames() {
		documented := strings.Contains(text, name+"`") || strings.Contains(text, name+"=") || strings.Contains(text, name+" ") || strings.Contains(text, name+",")
		if documented == undocumented[name] {
			t.Errorf("%s: documented %v, want %v", name, documented, !undocumented[name])
		}
	}
}
