// Package envoyconf reads envoyproxy/ratelimit's own YAML configuration
// (one domain a file) and finds the limit of a descriptor exactly as envoy
// ratelimit does: the descriptor's entries are followed down the domain's
// tree in order, at each level "key_value" before a wildcard value
// ("prefix*") before the bare key, and the limit is the rate_limit of the
// node the last entry lands on; nothing else is a match.
package envoyconf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"gopkg.in/yaml.v3"
)

// Unit is a rate limit unit of the Envoy API (SECOND … YEAR).
type Unit = rlsv3.RateLimitResponse_RateLimit_Unit

// Window is the length of a unit's window as envoy ratelimit counts it:
// MONTH is 30 days and YEAR 365 days, windows aligned on the Unix epoch.
// It is 0 for UNKNOWN.
func Window(u Unit) time.Duration {
	const day = 24 * time.Hour
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return time.Second
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return time.Minute
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		return time.Hour
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		return day
	case rlsv3.RateLimitResponse_RateLimit_WEEK:
		return 7 * day
	case rlsv3.RateLimitResponse_RateLimit_MONTH:
		return 30 * day
	case rlsv3.RateLimitResponse_RateLimit_YEAR:
		return 365 * day
	}
	return 0
}

// Limit is the rate_limit block of one configured descriptor.
type Limit struct {
	// FullKey names the configured node: domain, then each level's key or
	// key_value, dot-separated ("messaging.message_type_marketing.to_number"),
	// as envoy ratelimit names its stats. It is bounded by the configuration,
	// never by request values.
	FullKey         string
	Name            string // rate_limit.name: what `replaces` refers to
	RequestsPerUnit uint32
	Unit            Unit
	Unlimited       bool
	Shadow          bool // shadow_mode: counted, never denies
	Replaces        []string
}

// Window is the limit's window length.
func (l *Limit) Window() time.Duration { return Window(l.Unit) }

// Entry is one key/value pair of a request's descriptor.
type Entry struct {
	Key, Value string
}

type node struct {
	children  map[string]*node
	wildcards []string // children keys ending in "*", in file order
	limit     *Limit
}

// Config is a loaded set of domains. It is immutable.
type Config struct {
	domains map[string]*node
	files   []string
}

// Domains lists the configured domains, sorted.
func (c *Config) Domains() []string {
	out := make([]string, 0, len(c.domains))
	for d := range c.domains {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// HasDomain reports whether domain is configured.
func (c *Config) HasDomain(domain string) bool { return c.domains[domain] != nil }

// Files lists the files the configuration was read from.
func (c *Config) Files() []string { return c.files }

// Empty is a configuration without domains: every descriptor is OK.
func Empty() *Config { return &Config{domains: map[string]*node{}} }

// Lookup returns the limit of a descriptor of domain, or nil when envoy
// ratelimit would apply none (unknown domain, a descriptor that lands
// nowhere or on a node without rate_limit, or one with more entries than
// the tree has levels).
func (c *Config) Lookup(domain string, entries []Entry) *Limit {
	d := c.domains[domain]
	if d == nil {
		return nil
	}
	var found *Limit
	level := d
	var buf [128]byte
	for i, e := range entries {
		// "key_value", built without allocating (as envoy ratelimit's map key).
		kv := append(append(append(buf[:0], e.Key...), '_'), e.Value...)
		next := level.children[string(kv)]
		if next == nil {
			for _, w := range level.wildcards {
				if p := w[:len(w)-1]; len(kv) >= len(p) && string(kv[:len(p)]) == p {
					next = level.children[w]
					break
				}
			}
		}
		if next == nil {
			next = level.children[e.Key]
		}
		if next == nil {
			return nil
		}
		if i == len(entries)-1 {
			found = next.limit
		}
		if len(next.children) == 0 {
			break
		}
		level = next
	}
	return found
}

// The keys envoy ratelimit's file format knows.
var validKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true,
	"rate_limit": true, "unit": true, "requests_per_unit": true,
	"unlimited": true, "shadow_mode": true, "name": true, "replaces": true,
	"detailed_metric": true, // stats only: accepted, no effect here
}

// Keys of newer envoy ratelimit releases whose behaviour quota does not
// have: refused by name rather than silently ignored.
var unsupportedKeys = map[string]bool{
	"unit_multiplier": true, "quota_mode": true, "share_threshold": true,
	"value_to_metric": true, "soft_requests_per_unit": true,
}

type yamlReplaces struct {
	Name string `yaml:"name"`
}

type yamlRateLimit struct {
	RequestsPerUnit uint32         `yaml:"requests_per_unit"`
	Unit            string         `yaml:"unit"`
	Unlimited       bool           `yaml:"unlimited"`
	Name            string         `yaml:"name"`
	Replaces        []yamlReplaces `yaml:"replaces"`
}

type yamlDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *yamlRateLimit   `yaml:"rate_limit"`
	Descriptors    []yamlDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
}

// File is one parsed configuration file: a domain and its descriptors.
type File struct {
	Domain      string           `yaml:"domain"`
	Descriptors []yamlDescriptor `yaml:"descriptors"`
}

// ConfigError is a configuration error, worded as envoy ratelimit words it
// ("<file>: <what>").
type ConfigError string

func (e ConfigError) Error() string { return string(e) }

func configError(name, format string, args ...any) error {
	return ConfigError(name + ": " + fmt.Sprintf(format, args...))
}

// ParseFile parses one configuration file's content; name is used in errors.
func ParseFile(name string, data []byte) (*File, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, configError(name, "error loading config file: %s", oneLine(err.Error()))
	}
	if len(root.Content) > 0 {
		if err := validateKeys(name, root.Content[0]); err != nil {
			return nil, err
		}
	}
	var f File
	if err := root.Decode(&f); err != nil && len(root.Content) > 0 {
		return nil, configError(name, "error loading config file: %s", oneLine(err.Error()))
	}
	return &f, nil
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// validateKeys walks the document as envoy ratelimit's validateYamlKeys
// does: every mapping key a known string, every list a list of mappings.
func validateKeys(name string, n *yaml.Node) error {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := validateKeys(name, c); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
				return configError(name, "config error, key is not of type string: %v", k.Value)
			}
			if unsupportedKeys[k.Value] {
				return configError(name, "config error, key '%s' (line %d) is not supported by quota", k.Value, k.Line)
			}
			if !validKeys[k.Value] {
				return configError(name, "config error, unknown key '%s'", k.Value)
			}
			if err := validateKeys(name, v); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for _, e := range n.Content {
			if e.Kind != yaml.MappingNode {
				return configError(name, "config error, yaml file contains list of type other than map: %v", e.Value)
			}
			if err := validateKeys(name, e); err != nil {
				return err
			}
		}
	case yaml.AliasNode:
		return validateKeys(name, n.Alias)
	}
	return nil
}

// Build checks files as envoy ratelimit does when it loads them and returns
// the configuration. Each domain may appear in one file only.
func Build(names []string, files []*File) (*Config, error) {
	c := &Config{domains: map[string]*node{}, files: names}
	for i, f := range files {
		name := names[i]
		if f.Domain == "" {
			return nil, configError(name, "config file cannot have empty domain")
		}
		if _, dup := c.domains[f.Domain]; dup {
			return nil, configError(name, "duplicate domain '%s' in config file", f.Domain)
		}
		d := &node{children: map[string]*node{}}
		if err := d.load(name, f.Domain+".", f.Descriptors); err != nil {
			return nil, err
		}
		c.domains[f.Domain] = d
	}
	return c, nil
}

func (n *node) load(name, parentKey string, descs []yamlDescriptor) error {
	for _, dc := range descs {
		if dc.Key == "" {
			return configError(name, "descriptor has empty key")
		}
		finalKey := dc.Key
		if dc.Value != "" {
			finalKey += "_" + dc.Value
		}
		fullKey := parentKey + finalKey
		if _, dup := n.children[finalKey]; dup {
			return configError(name, "duplicate descriptor composite key '%s'", fullKey)
		}
		child := &node{children: map[string]*node{}}
		if rl := dc.RateLimit; rl != nil {
			v, ok := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(rl.Unit)]
			validUnit := ok && v != int32(rlsv3.RateLimitResponse_RateLimit_UNKNOWN)
			if rl.Unlimited {
				if validUnit {
					return configError(name, "should not specify rate limit unit when unlimited")
				}
			} else if !validUnit {
				return configError(name, "invalid rate limit unit '%s'", rl.Unit)
			}
			lim := &Limit{
				FullKey:         fullKey,
				Name:            rl.Name,
				RequestsPerUnit: rl.RequestsPerUnit,
				Unit:            Unit(v),
				Unlimited:       rl.Unlimited,
				Shadow:          dc.ShadowMode,
			}
			for _, r := range rl.Replaces {
				if r.Name == "" {
					return configError(name, "should not have an empty replaces entry")
				}
				if r.Name == rl.Name {
					return configError(name, "replaces should not contain name of same descriptor")
				}
				lim.Replaces = append(lim.Replaces, r.Name)
			}
			child.limit = lim
		}
		if err := child.load(name, fullKey+".", dc.Descriptors); err != nil {
			return err
		}
		n.children[finalKey] = child
		if strings.HasSuffix(finalKey, "*") {
			n.wildcards = append(n.wildcards, finalKey)
		}
	}
	return nil
}

// Load reads path: one file, or every *.yaml / *.yml file of a directory
// (dot files skipped), each one domain.
func Load(path string) (*Config, error) {
	names, files, err := readFiles(path)
	if err != nil {
		return nil, err
	}
	return Build(names, files)
}

func configFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("envoy config: %w", err)
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("envoy config: %w", err)
	}
	var names []string
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || strings.HasPrefix(n, ".") {
			continue
		}
		if ext := filepath.Ext(n); ext == ".yaml" || ext == ".yml" {
			names = append(names, filepath.Join(path, n))
		}
	}
	if len(names) == 0 {
		return nil, errors.New("envoy config: directory " + path + " has no .yaml or .yml file")
	}
	return names, nil // ReadDir sorts by name
}

// ReadFiles reads path (a file or a directory, as Load), checks it as Load
// does and returns its parsed files, for tools that translate them.
func ReadFiles(path string) ([]string, []*File, error) {
	names, files, err := readFiles(path)
	if err != nil {
		return nil, nil, err
	}
	if _, err := Build(names, files); err != nil {
		return nil, nil, err
	}
	return names, files, nil
}

func readFiles(path string) ([]string, []*File, error) {
	names, err := configFiles(path)
	if err != nil {
		return nil, nil, err
	}
	files := make([]*File, len(names))
	for i, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, nil, fmt.Errorf("envoy config: %w", err)
		}
		if files[i], err = ParseFile(n, b); err != nil {
			return nil, nil, err
		}
	}
	return names, files, nil
}
