// Package rules reads, validates and matches the limit rules: which
// dimensions of a call are counted together, how many calls they may make
// in which window, and by which algorithm.
package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Algorithm names a way of counting.
type Algorithm string

// The algorithms a rule may name.
const (
	FixedWindow   Algorithm = "fixed_window"
	SlidingWindow Algorithm = "sliding_window"
	TokenBucket   Algorithm = "token_bucket"
	SlidingLog    Algorithm = "sliding_log"
	MinInterval   Algorithm = "min_interval"
)

// Algorithms lists every algorithm a rule may name.
var Algorithms = []Algorithm{FixedWindow, SlidingWindow, TokenBucket, SlidingLog, MinInterval}

// Bounds on what a rules file may ask for.
const (
	MaxRules          = 256
	MaxLimitsPerRule  = 8
	MaxDimensions     = 8
	MaxLimit          = 1_000_000_000_000
	MaxWindow         = 366 * 24 * time.Hour
	MaxSlidingLogSize = 10_000 // a sliding log keeps `limit` timestamps per identity
)

// Reserved request fields that are never dimensions.
var reserved = map[string]bool{"cost": true, "dry_run": true, "report": true}

// Limit is one "at most Limit calls per Window".
type Limit struct {
	Limit  int64    `yaml:"limit" json:"limit"`
	Window Duration `yaml:"window" json:"window"`
}

// Rule is one entry of the rules file.
type Rule struct {
	Name       string            `yaml:"name" json:"name"`
	Dimensions []string          `yaml:"dimensions" json:"dimensions"`
	Match      map[string]string `yaml:"match,omitempty" json:"match,omitempty"`
	Limit      int64             `yaml:"limit,omitempty" json:"limit,omitempty"`
	Window     Duration          `yaml:"window,omitempty" json:"window,omitempty"`
	Limits     []Limit           `yaml:"limits,omitempty" json:"limits,omitempty"`
	Algorithm  Algorithm         `yaml:"algorithm" json:"algorithm"`
	Shadow     bool              `yaml:"shadow,omitempty" json:"shadow,omitempty"`
}

// EffectiveLimits returns the rule's limits whether written as limit/window
// or as a limits list.
func (r *Rule) EffectiveLimits() []Limit {
	if len(r.Limits) > 0 {
		return r.Limits
	}
	return []Limit{{Limit: r.Limit, Window: r.Window}}
}

// File is the document form of a rules file and of PUT /v1/rules.
type File struct {
	Rules []Rule          `yaml:"rules" json:"rules"`
	Plans map[string]Plan `yaml:"plans,omitempty" json:"plans,omitempty"`
}

// Set is a validated, immutable set of rules with a version that changes
// whenever the rules do.
type Set struct {
	Version string
	Rules   []Rule
	Plans   map[string]Plan // as written; nil without plans

	planLimits map[string]map[string][]Limit // plan -> rule -> limits
}

// File returns the set in its document form.
func (s *Set) File() File { return File{Rules: s.Rules, Plans: s.Plans} }

// ParseYAML reads and validates a rules file.
func ParseYAML(data []byte) (*Set, error) {
	var f File
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("rules file is empty: it needs a top-level `rules:` list")
		}
		return nil, fmt.Errorf("rules file: %s", oneLine(err.Error()))
	}
	return NewSetWithPlans(f.Rules, f.Plans)
}

// oneLine folds yaml's multi-line error lists so start-up fails with one line.
func oneLine(s string) string {
	parts := strings.Split(s, "\n")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return strings.Join(parts, " ")
}

// ParseJSON reads and validates a JSON document `{"rules": [...]}`.
func ParseJSON(data []byte) (*Set, error) {
	var f File
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	if f.Rules == nil {
		return nil, errors.New("rules: body needs a `rules` list")
	}
	return NewSetWithPlans(f.Rules, f.Plans)
}

// NewSet validates rules and returns them as a Set. The rules are copied.
func NewSet(rs []Rule) (*Set, error) { return NewSetWithPlans(rs, nil) }

// NewSetWithPlans validates rules and the plans that change their limits
// and returns them as a Set. Both are copied.
func NewSetWithPlans(rs []Rule, plans map[string]Plan) (*Set, error) {
	if len(rs) > MaxRules {
		return nil, fmt.Errorf("rules: %d rules, at most %d allowed", len(rs), MaxRules)
	}
	seen := make(map[string]bool, len(rs))
	out := make([]Rule, len(rs))
	for i, r := range rs {
		if err := validate(&r); err != nil {
			if r.Name != "" {
				return nil, fmt.Errorf("rule %q: %w", r.Name, err)
			}
			return nil, fmt.Errorf("rule #%d: %w", i, err)
		}
		if seen[r.Name] {
			return nil, fmt.Errorf("rule %q: name used twice", r.Name)
		}
		seen[r.Name] = true
		out[i] = clone(r)
	}
	resolved, err := resolvePlans(out, plans)
	if err != nil {
		return nil, err
	}
	plans = clonePlans(plans)
	return &Set{Version: version(out, plans), Rules: out, Plans: plans, planLimits: resolved}, nil
}

func clone(r Rule) Rule {
	r.Dimensions = slices.Clone(r.Dimensions)
	r.Limits = slices.Clone(r.Limits)
	if r.Match != nil {
		m := make(map[string]string, len(r.Match))
		for k, v := range r.Match {
			m[k] = v
		}
		r.Match = m
	}
	return r
}

// version hashes the rules, and the plans when there are any (so a set
// without plans keeps the version it had before plans existed).
func version(rs []Rule, plans map[string]Plan) string {
	var b []byte
	if len(plans) == 0 {
		b, _ = json.Marshal(rs) // Rule has only marshalable fields
	} else {
		b, _ = json.Marshal(File{Rules: rs, Plans: plans}) // map keys are sorted
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// ValidName reports whether s is a valid rule or dimension name.
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > 32 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// ValidValue reports whether s may be a dimension value: 1–256 bytes of UTF-8.
func ValidValue(s string) bool {
	return len(s) >= 1 && len(s) <= 256 && utf8.ValidString(s)
}

func validate(r *Rule) error {
	if !ValidName(r.Name) {
		return errors.New("name must match [a-z][a-z0-9_]{0,31}")
	}
	if err := validateDimensions(r); err != nil {
		return err
	}
	if err := validateLimitForm(r); err != nil {
		return err
	}
	if r.Algorithm == "" {
		return fmt.Errorf("algorithm is required (one of %s)", algorithmList())
	}
	if !slices.Contains(Algorithms, r.Algorithm) {
		return fmt.Errorf("unknown algorithm %q (one of %s)", r.Algorithm, algorithmList())
	}
	return checkLimits(r.Algorithm, r.EffectiveLimits())
}

// checkLimits validates limits counted by algo: a rule's own, or those a
// plan or an override gives it.
func checkLimits(algo Algorithm, ls []Limit) error {
	if len(ls) == 0 {
		return errors.New("needs at least one limit")
	}
	if len(ls) > MaxLimitsPerRule {
		return fmt.Errorf("at most %d limits per rule", MaxLimitsPerRule)
	}
	for i, l := range ls {
		if l.Limit < 1 || l.Limit > MaxLimit {
			return fmt.Errorf("limit must be between 1 and %d, got %d", int64(MaxLimit), l.Limit)
		}
		w := time.Duration(l.Window)
		if !l.Window.IsCalendar() && (w < time.Second || w > MaxWindow || w%time.Second != 0) {
			return fmt.Errorf("window must be a whole number of seconds between 1s and 366d, or day, week or month, got %s", l.Window)
		}
		for _, o := range ls[:i] {
			if o.Window == l.Window {
				return fmt.Errorf("two limits with window %s", l.Window)
			}
		}
		if err := checkAlgorithmLimit(algo, l); err != nil {
			return err
		}
	}
	return nil
}

// checkAlgorithmLimit refuses a limit its algorithm cannot count exactly.
func checkAlgorithmLimit(algo Algorithm, l Limit) error {
	if l.Window.IsCalendar() {
		if algo != FixedWindow {
			return fmt.Errorf("window %s is a calendar period, which only fixed_window counts: a sliding window, a bucket's refill or a spacing needs a fixed length (use e.g. 24h)", l.Window)
		}
		return nil
	}
	ms := time.Duration(l.Window).Milliseconds()
	switch {
	case algo == SlidingLog && l.Limit > MaxSlidingLogSize:
		return fmt.Errorf("sliding_log keeps one timestamp per allowed call: limit %d is over %d; use sliding_window", l.Limit, MaxSlidingLogSize)
	case algo == TokenBucket && l.Limit > MaxTokenBucketUnits/ms:
		// Tokens are counted exactly in units of 1/window_ms of a token.
		return fmt.Errorf("token_bucket counts tokens in units of 1/window_ms: limit × window in ms must be at most 2^52, so at most %d per %s; use a shorter window or fixed_window", MaxTokenBucketUnits/ms, l.Window)
	case algo == MinInterval && l.Limit > ms:
		return fmt.Errorf("min_interval spaces calls window/limit apart: limit %d per %s is under 1 ms apart; at most %d", l.Limit, l.Window, ms)
	}
	return nil
}

// MaxTokenBucketUnits bounds limit × window (in ms) of a token_bucket limit:
// the hot tier's Lua keeps tokens in units of 1/window_ms, exact as doubles.
const MaxTokenBucketUnits = 1 << 52

func validateDimensions(r *Rule) error {
	if len(r.Dimensions) == 0 {
		return errors.New("dimensions must name at least one dimension")
	}
	if len(r.Dimensions) > MaxDimensions {
		return fmt.Errorf("at most %d dimensions", MaxDimensions)
	}
	for i, d := range r.Dimensions {
		if !ValidName(d) {
			return fmt.Errorf("dimension %q must match [a-z][a-z0-9_]{0,31}", d)
		}
		if reserved[d] {
			return fmt.Errorf("dimension %q is a reserved request field", d)
		}
		if slices.Contains(r.Dimensions[:i], d) {
			return fmt.Errorf("dimension %q listed twice", d)
		}
	}
	for k, v := range r.Match {
		if !slices.Contains(r.Dimensions, k) {
			return fmt.Errorf("match on %q, which is not one of the rule's dimensions", k)
		}
		if !ValidValue(v) {
			return fmt.Errorf("match value for %q must be 1-256 bytes of UTF-8", k)
		}
	}
	return nil
}

// validateLimitForm checks that a rule gives its limits one way.
func validateLimitForm(r *Rule) error {
	single := r.Limit != 0 || r.Window != 0
	if single && len(r.Limits) > 0 {
		return errors.New("give either limit/window or limits, not both")
	}
	if !single && len(r.Limits) == 0 {
		return errors.New("needs limit and window (or a limits list)")
	}
	return nil
}

func algorithmList() string {
	s := make([]string, len(Algorithms))
	for i, a := range Algorithms {
		s[i] = string(a)
	}
	return strings.Join(s, ", ")
}

// Applies reports whether rule r applies to a call with the given dimension
// lookup: every dimension present and every match equal.
func (r *Rule) Applies(lookup func(string) (string, bool)) bool {
	for _, d := range r.Dimensions {
		if _, ok := lookup(d); !ok {
			return false
		}
	}
	for k, want := range r.Match {
		if v, _ := lookup(k); v != want {
			return false
		}
	}
	return true
}

// MarshalYAML writes the set as a rules file.
func (s *Set) MarshalYAML() ([]byte, error) {
	return yaml.Marshal(s.File())
}

// WriteFile saves the set to path atomically (temporary file, then rename),
// so a reader never sees half a file.
func WriteFile(path string, s *Set) error {
	b, err := s.MarshalYAML()
	if err != nil {
		return fmt.Errorf("write rules: %w", err)
	}
	dir, base := filepath.Split(path)
	tmp, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return fmt.Errorf("write rules: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write rules: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write rules: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write rules: %w", err)
	}
	return nil
}

// ReadFile reads and validates a rules file.
func ReadFile(path string) (*Set, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rules file: %w", err)
	}
	s, err := ParseYAML(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}
