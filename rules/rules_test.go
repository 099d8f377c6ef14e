package rules_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quota-platform/quota/rules"
)

func TestParseYAML_DefaultRulesFileIsValid(t *testing.T) {
	t.Parallel()
	set, err := rules.ReadFile("../deploy/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Rules) != 2 || set.Rules[0].Name != "app_ip_hourly" || set.Rules[1].Limit != 1000 {
		t.Fatalf("default rules: %+v", set.Rules)
	}
	if time.Duration(set.Rules[0].Window) != time.Hour {
		t.Fatalf("window %v", set.Rules[0].Window)
	}
}

func TestParseYAML_DesignExampleWithSeveralLimits(t *testing.T) {
	t.Parallel()
	set, err := rules.ParseYAML([]byte(`
rules:
  - name: login_per_user
    dimensions: [event, user_id]
    match: {event: login}
    limits: [{limit: 1, window: 1s}, {limit: 2, window: 1m}, {limit: 5, window: 1h}, {limit: 10, window: 24h}]
    algorithm: sliding_window
    shadow: false
`))
	if err != nil {
		t.Fatal(err)
	}
	ls := set.Rules[0].EffectiveLimits()
	if len(ls) != 4 || time.Duration(ls[3].Window) != 24*time.Hour || ls[3].Limit != 10 {
		t.Fatalf("limits %+v", ls)
	}
}

func TestParseYAML_RejectsInvalidRulesWithAClearReason(t *testing.T) {
	t.Parallel()
	rule := func(body string) string { return "rules:\n  - " + strings.ReplaceAll(body, "\n", "\n    ") + "\n" }
	cases := []struct {
		name, yaml, want string
	}{
		{"empty file", ``, "empty"},
		{"not yaml", "rules: [", "rules file"},
		{"unknown field", rule("name: a\ndimensions: [x]\nlimit: 1\nwindow: 1h\nalgorithm: fixed_window\nlimt: 3"), "limt"},
		{"bad name", rule("name: A-b\ndimensions: [x]\nlimit: 1\nwindow: 1h\nalgorithm: fixed_window"), "name must match"},
		{"no dimensions", rule("name: a\nlimit: 1\nwindow: 1h\nalgorithm: fixed_window"), "dimensions"},
		{"bad dimension", rule("name: a\ndimensions: [X]\nlimit: 1\nwindow: 1h\nalgorithm: fixed_window"), "dimension \"X\""},
		{"reserved dimension", rule("name: a\ndimensions: [cost]\nlimit: 1\nwindow: 1h\nalgorithm: fixed_window"), "reserved"},
		{"duplicate dimension", rule("name: a\ndimensions: [x, x]\nlimit: 1\nwindow: 1h\nalgorithm: fixed_window"), "twice"},
		{"match outside dimensions", rule("name: a\ndimensions: [x]\nmatch: {y: z}\nlimit: 1\nwindow: 1h\nalgorithm: fixed_window"), "match on \"y\""},
		{"zero limit", rule("name: a\ndimensions: [x]\nlimit: 0\nwindow: 1h\nalgorithm: fixed_window"), "limit must be"},
		{"negative limit", rule("name: a\ndimensions: [x]\nlimit: -1\nwindow: 1h\nalgorithm: fixed_window"), "limit must be"},
		{"no window", rule("name: a\ndimensions: [x]\nlimit: 5\nalgorithm: fixed_window"), "window must be"},
		{"sub-second window", rule("name: a\ndimensions: [x]\nlimit: 5\nwindow: 500ms\nalgorithm: fixed_window"), "whole number of seconds"},
		{"bad window", rule("name: a\ndimensions: [x]\nlimit: 5\nwindow: soon\nalgorithm: fixed_window"), "invalid duration"},
		{"both forms", rule("name: a\ndimensions: [x]\nlimit: 5\nwindow: 1h\nlimits: [{limit: 1, window: 1s}]\nalgorithm: fixed_window"), "not both"},
		{"same window twice", rule("name: a\ndimensions: [x]\nlimits: [{limit: 1, window: 1m}, {limit: 2, window: 60s}]\nalgorithm: fixed_window"), "two limits"},
		{"no algorithm", rule("name: a\ndimensions: [x]\nlimit: 5\nwindow: 1h"), "algorithm is required"},
		{"unknown algorithm", rule("name: a\ndimensions: [x]\nlimit: 5\nwindow: 1h\nalgorithm: leaky_bucket"), "unknown algorithm"},
		{"huge sliding log", rule("name: a\ndimensions: [x]\nlimit: 20000\nwindow: 1h\nalgorithm: sliding_log"), "sliding_log"},
		{"duplicate names", "rules:\n  - {name: a, dimensions: [x], limit: 1, window: 1h, algorithm: fixed_window}\n  - {name: a, dimensions: [y], limit: 1, window: 1h, algorithm: fixed_window}\n", "name used twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rules.ParseYAML([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.yaml)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error should be one line: %q", err)
			}
		})
	}
}

func TestSet_VersionChangesOnlyWithTheRules(t *testing.T) {
	t.Parallel()
	a, _ := rules.ParseYAML([]byte("rules:\n  - {name: a, dimensions: [x], limit: 1, window: 1h, algorithm: fixed_window}\n"))
	b, _ := rules.ParseYAML([]byte("rules:\n  - name: a\n    dimensions: [x]\n    limit: 1\n    window: 60m\n    algorithm: fixed_window\n"))
	c, _ := rules.ParseYAML([]byte("rules:\n  - {name: a, dimensions: [x], limit: 2, window: 1h, algorithm: fixed_window}\n"))
	if a.Version != b.Version {
		t.Errorf("same rules, different versions: %s %s", a.Version, b.Version)
	}
	if a.Version == c.Version {
		t.Errorf("different rules, same version %s", a.Version)
	}
}

func TestWriteFile_RoundTripsThroughTheFile(t *testing.T) {
	t.Parallel()
	set, err := rules.ParseJSON([]byte(`{"rules":[{"name":"l","dimensions":["event","user_id"],"match":{"event":"login"},
		"limits":[{"limit":1,"window":"1s"},{"limit":10,"window":"24h"}],"algorithm":"fixed_window","shadow":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := rules.WriteFile(path, set); err != nil {
		t.Fatal(err)
	}
	back, err := rules.ReadFile(path)
	if err != nil {
		b, _ := os.ReadFile(path)
		t.Fatalf("%v\n%s", err, b)
	}
	if back.Version != set.Version {
		t.Fatalf("version %s after the round trip, want %s", back.Version, set.Version)
	}
}

func TestRule_AppliesWhenEveryDimensionIsPresentAndMatchEquals(t *testing.T) {
	t.Parallel()
	r := rules.Rule{Dimensions: []string{"event", "user_id"}, Match: map[string]string{"event": "login"}}
	lookup := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	cases := []struct {
		dims map[string]string
		want bool
	}{
		{map[string]string{"event": "login", "user_id": "u"}, true},
		{map[string]string{"event": "login", "user_id": "u", "ip": "1"}, true},
		{map[string]string{"event": "logout", "user_id": "u"}, false},
		{map[string]string{"event": "login"}, false},
		{map[string]string{"user_id": "u"}, false},
	}
	for _, tc := range cases {
		if got := r.Applies(lookup(tc.dims)); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.dims, got, tc.want)
		}
	}
}

func TestDuration_ParsesAndPrintsWholeUnits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, out string }{
		{"1s", "1s"}, {"60s", "1m"}, {"90s", "90s"}, {"1h", "1h"}, {"24h", "24h"}, {"7d", "7d"}, {"2d", "2d"}, {"1d", "24h"},
		{"day", "day"}, {"week", "week"}, {"month", "month"}, {"1500ms", "1.5s"},
	} {
		d, err := rules.ParseDuration(tc.in)
		if err != nil || d.String() != tc.out {
			t.Errorf("%s: %v %v, want %s", tc.in, d, err, tc.out)
		}
		if got := string(d.Append([]byte("w="))); got != "w="+tc.out {
			t.Errorf("%s: Append gives %q, want %q", tc.in, got, "w="+tc.out)
		}
	}
	for _, bad := range []string{"", "x", "-d", "1.5d", "d"} {
		if _, err := rules.ParseDuration(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzParseYAML(f *testing.F) {
	seed, _ := os.ReadFile("../deploy/rules.yaml")
	f.Add(seed)
	f.Add([]byte("rules:\n  - {name: a, dimensions: [x], limits: [{limit: 1, window: 1s}], algorithm: sliding_window, match: {x: y}}\n"))
	f.Add([]byte("rules: [{name: a}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		set, err := rules.ParseYAML(data)
		if err != nil {
			return
		}
		// Whatever is accepted must survive a round trip unchanged.
		out, err := set.MarshalYAML()
		if err != nil {
			t.Fatal(err)
		}
		back, err := rules.ParseYAML(out)
		if err != nil || back.Version != set.Version {
			t.Fatalf("round trip: %v\n%s", err, out)
		}
	})
}
