package envoyconf_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/quota-platform/quota/envoyconf"
)

func loadTestdata(t *testing.T) *envoyconf.Config {
	t.Helper()
	c, err := envoyconf.Load("testdata")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// entries turns "k=v,k2=v2" into a descriptor's entries.
func entries(s string) []envoyconf.Entry {
	var out []envoyconf.Entry
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, envoyconf.Entry{Key: k, Value: v})
	}
	return out
}

// TestLookup_FollowsEnvoyRatelimitMatching runs envoy ratelimit's own
// example configurations (testdata, copied from envoyproxy/ratelimit)
// through the cases its README and tests describe.
func TestLookup_FollowsEnvoyRatelimitMatching(t *testing.T) {
	t.Parallel()
	c := loadTestdata(t)
	const none = ""
	cases := []struct {
		name, domain, desc string
		wantKey            string // FullKey of the limit, or none
	}{
		// basic_config.yaml
		{"key-only node at level 2 matches any value", "test-domain", "key1=value1,subkey1=anything", "test-domain.key1_value1.subkey1"},
		{"value-specific node wins over key-only", "test-domain", "key1=value1,subkey1=subvalue1", "test-domain.key1_value1.subkey1_subvalue1"},
		{"node without rate_limit is no limit (no fallback to children)", "test-domain", "key1=value1", none},
		{"first level value must match: other value lands nowhere", "test-domain", "key1=other,subkey1=x", none},
		{"key-only default at level 1", "test-domain", "key2=whatever", "test-domain.key2"},
		{"value-specific override at level 1", "test-domain", "key2=value2", "test-domain.key2_value2"},
		{"value without rate_limit is whitelisted, not the key's default", "test-domain", "key2=value3", none},
		{"more entries than levels: no limit (no fallback to the parent)", "test-domain", "key2=value2,sub=x", none},
		{"limit of the node the last entry lands on (parent has its own)", "test-domain", "key5=value5,subkey5=subvalue5", "test-domain.key5_value5.subkey5_subvalue5"},
		{"parent with a limit and children, one entry", "test-domain", "key5=value5", "test-domain.key5_value5"},
		{"parent with a limit, unmatched child: nothing", "test-domain", "key5=value5,subkey5=other", none},
		{"unknown key", "test-domain", "nokey=x", none},
		{"unknown domain", "nodomain", "key2=x", none},
		{"descriptors are case-sensitive", "test-domain", "KEY2=x", none},
		// example.yaml
		{"example: nested value-specific pair", "rl", "source_cluster=proxy,destination_cluster=mock", "rl.source_cluster_proxy.destination_cluster_mock"},
		{"example: nested value not configured", "rl", "source_cluster=proxy,destination_cluster=other", none},
		{"example: key with limit and children, alone", "rl", "foo=x", "rl.foo"},
		{"example: child key-only", "rl", "foo=x,bar=y", "rl.foo.bar"},
		{"example: banned value", "rl", "foo=x,bar=banned", "rl.foo.bar_banned"},
		{"example: shadow value", "rl", "foo=x,baz=shady", "rl.foo.baz_shady"},
		{"example: unlimited", "rl", "foo=x,bay=y", "rl.foo.bay"},
		// replaces.yaml (README example 7)
		{"example7: specific limit", "example7", "key_1=value_1,user=bkthomps", "example7.key_1_value_1.user_bkthomps"},
		{"example7: other user lands nowhere", "example7", "key_1=value_1,user=other", none},
		// wildcard.yaml
		{"wildcard value matches a prefix", "wildcard-domain", "wild=foo123", "wildcard-domain.wild_foo*"},
		{"wildcard value matches the bare prefix", "wildcard-domain", "wild=foo", "wildcard-domain.wild_foo*"},
		{"wildcard value does not match another prefix", "wildcard-domain", "wild=bar", none},
		{"a star inside a value is literal", "wildcard-domain", "midWild=barXb", none},
		{"a star inside a value matches itself", "wildcard-domain", "midWild=bar*b", "wildcard-domain.midWild_bar*b"},
		{"exact value without star", "wildcard-domain", "noWild=foo", "wildcard-domain.noWild_foo"},
		{"no prefix match without star", "wildcard-domain", "noWild=foo1", none},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := c.Lookup(tc.domain, entries(tc.desc))
			got := none
			if l != nil {
				got = l.FullKey
			}
			if got != tc.wantKey {
				t.Fatalf("Lookup(%s, %s) = %q, want %q", tc.domain, tc.desc, got, tc.wantKey)
			}
		})
	}
}

func TestLookup_ReadsTheLimitBlock(t *testing.T) {
	t.Parallel()
	c := loadTestdata(t)
	cases := []struct {
		desc              string
		domain            string
		perUnit           uint32
		unit              rlsv3.RateLimitResponse_RateLimit_Unit
		unlimited, shadow bool
		name              string
		replaces          []string
	}{
		{"key1=value1,subkey1=x", "test-domain", 5, rlsv3.RateLimitResponse_RateLimit_SECOND, false, false, "", nil},
		{"key2=value2", "test-domain", 30, rlsv3.RateLimitResponse_RateLimit_MINUTE, false, false, "", nil},
		{"foo=x,bar=banned", "rl", 0, rlsv3.RateLimitResponse_RateLimit_MINUTE, false, false, "", nil},
		{"foo=x,baz=shady", "rl", 1, rlsv3.RateLimitResponse_RateLimit_MINUTE, false, true, "", nil},
		{"foo=x,bay=y", "rl", 0, rlsv3.RateLimitResponse_RateLimit_UNKNOWN, true, false, "", nil},
		{"qux=y", "rl", 0, rlsv3.RateLimitResponse_RateLimit_UNKNOWN, true, false, "", nil},
		{"key_1=value_1,user=bkthomps", "example7", 5, rlsv3.RateLimitResponse_RateLimit_MINUTE, false, false, "specific_limit", nil},
		{"key_2=value_2,user=bkthomps", "example7", 10, rlsv3.RateLimitResponse_RateLimit_MINUTE, false, false, "", []string{"specific_limit"}},
	}
	for _, tc := range cases {
		l := c.Lookup(tc.domain, entries(tc.desc))
		if l == nil {
			t.Errorf("%s: no limit", tc.desc)
			continue
		}
		if l.RequestsPerUnit != tc.perUnit || l.Unit != tc.unit || l.Unlimited != tc.unlimited || l.Shadow != tc.shadow ||
			l.Name != tc.name || strings.Join(l.Replaces, ",") != strings.Join(tc.replaces, ",") {
			t.Errorf("%s: %+v", tc.desc, *l)
		}
	}
}

func TestWindow_EveryUnitEnvoyAccepts(t *testing.T) {
	t.Parallel()
	c := loadTestdata(t)
	day := 24 * time.Hour
	for value, want := range map[string]time.Duration{
		"second": time.Second, "minute": time.Minute, "hour": time.Hour, "day": day,
		"week": 7 * day, "month": 30 * day, "year": 365 * day,
	} {
		l := c.Lookup("units", entries("u="+value))
		if l == nil || l.Window() != want {
			t.Errorf("unit %s: %+v, want window %s", value, l, want)
		}
	}
}

// TestLoad_RejectsWhatEnvoyRatelimitRejects: the bad files (copied from
// envoy ratelimit's tests where they exist) fail with its wording.
func TestLoad_RejectsWhatEnvoyRatelimitRejects(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct{ path, want string }{
		{"testdata/bad/duplicate_key.yaml", "duplicate descriptor composite key 'test-domain.key1_value1'"},
		{"testdata/bad/replaces_self.yaml", "replaces should not contain name of same descriptor"},
		{"testdata/bad/unlimited_with_unit.yaml", "should not specify rate limit unit when unlimited"},
		{"testdata/bad/misspelled_key.yaml", "config error, unknown key 'ratelimit'"},
		{"testdata/bad/bad_unit.yaml", "invalid rate limit unit 'fortnight'"},
		{write("nodomain.yaml", "descriptors:\n  - key: a\n"), "config file cannot have empty domain"},
		{write("empty.yaml", ""), "config file cannot have empty domain"},
		{write("emptykey.yaml", "domain: d\ndescriptors:\n  - value: a\n"), "descriptor has empty key"},
		{write("nounit.yaml", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1}\n"), "invalid rate limit unit ''"},
		{write("emptyreplaces.yaml", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n"), "should not have an empty replaces entry"},
		{write("intkey.yaml", "domain: d\n1: x\n"), "config error, key is not of type string: 1"},
		{write("listofstrings.yaml", "domain: d\ndescriptors:\n  - a\n"), "config error, yaml file contains list of type other than map: a"},
		{write("syntax.yaml", "domain: [\n"), "error loading config file:"},
		{write("negative.yaml", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n"), "error loading config file:"},
		{write("multiplier.yaml", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, unit_multiplier: 5}\n"), "key 'unit_multiplier' (line 4) is not supported by quota"},
	}
	for _, tc := range cases {
		_, err := envoyconf.Load(tc.path)
		if err == nil {
			t.Errorf("%s: loaded", tc.path)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, tc.path+": ") || !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
			t.Errorf("%s: error %q, want one line %q naming the file", tc.path, msg, tc.want)
		}
	}
}

func TestLoad_DirectoryOneDomainPerFile(t *testing.T) {
	t.Parallel()
	c := loadTestdata(t)
	if got := strings.Join(c.Domains(), ","); got != "example7,platform,rl,test-domain,units,wildcard-domain" {
		t.Fatalf("domains %s", got)
	}
	dir := t.TempDir()
	for _, n := range []string{"a.yaml", "b.yml"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("domain: same\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ".hidden.yaml"), []byte("not: valid"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := envoyconf.Load(dir)
	if err == nil || !strings.Contains(err.Error(), "duplicate domain 'same' in config file") {
		t.Fatalf("two files of one domain: %v", err)
	}
	if _, err := envoyconf.Load(t.TempDir()); err == nil {
		t.Fatal("an empty directory loaded")
	}
}
