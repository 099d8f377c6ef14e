package rules

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// DefaultPlan is the plan of an app that is on no other: the rules' own
// limits. A rules file cannot define it.
const DefaultPlan = "default"

// MaxPlans bounds the plans of one rules file.
const MaxPlans = 64

// LimitsSpec is what a plan or an override gives one rule, written as a
// bare number (the rule's one window keeps), {limit, window} or
// {limits: [...]}.
type LimitsSpec struct {
	Limit  int64    `yaml:"limit,omitempty" json:"limit,omitempty"`
	Window Duration `yaml:"window,omitempty" json:"window,omitempty"`
	Limits []Limit  `yaml:"limits,omitempty" json:"limits,omitempty"`
}

// UnmarshalYAML reads a bare number or a mapping.
func (s *LimitsSpec) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var v int64
		if err := n.Decode(&v); err != nil || n.ShortTag() != "!!int" {
			return fmt.Errorf("line %d: a plan's limit must be a positive integer or {limit, window} or {limits: [...]}", n.Line)
		}
		*s = LimitsSpec{Limit: v}
		return nil
	}
	type plain LimitsSpec
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*s = LimitsSpec(p)
	return nil
}

// MarshalYAML writes a bare number when that is all the spec says.
func (s LimitsSpec) MarshalYAML() (any, error) {
	if s.Window == 0 && len(s.Limits) == 0 {
		return s.Limit, nil
	}
	type plain LimitsSpec
	return plain(s), nil
}

// UnmarshalJSON reads a bare number or an object, refusing unknown fields.
func (s *LimitsSpec) UnmarshalJSON(b []byte) error {
	var v int64
	if err := json.Unmarshal(b, &v); err == nil {
		*s = LimitsSpec{Limit: v}
		return nil
	}
	type plain LimitsSpec
	var p plain
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("limits must be a positive integer, {\"limit\": N} or {\"limits\": [{\"limit\", \"window\"}]}: %w", err)
	}
	*s = LimitsSpec(p)
	return nil
}

// Resolve turns the spec into rule r's limits: a number alone keeps the
// rule's window (and needs a rule with one limit).
func (s LimitsSpec) Resolve(r *Rule) ([]Limit, error) {
	switch {
	case len(s.Limits) > 0 && (s.Limit != 0 || s.Window != 0):
		return nil, errors.New("give either limit (and window) or limits, not both")
	case len(s.Limits) > 0:
		return slices.Clone(s.Limits), nil
	case s.Window != 0:
		return []Limit{{Limit: s.Limit, Window: s.Window}}, nil
	}
	own := r.EffectiveLimits()
	if len(own) != 1 {
		return nil, fmt.Errorf("rule %q has %d limits: give them as limits: [{limit, window}, ...]", r.Name, len(own))
	}
	return []Limit{{Limit: s.Limit, Window: own[0].Window}}, nil
}

// Plan is a named set of limits: for each rule it names, the limits of the
// apps on it.
type Plan map[string]LimitsSpec

// Rule returns the rule named name, or nil.
func (s *Set) Rule(name string) *Rule {
	for i := range s.Rules {
		if s.Rules[i].Name == name {
			return &s.Rules[i]
		}
	}
	return nil
}

// PlanLimits returns the limits plan gives rule, if it gives it any.
func (s *Set) PlanLimits(plan, rule string) ([]Limit, bool) {
	ls, ok := s.planLimits[plan][rule]
	return ls, ok
}

// HasPlan reports whether plan may be assigned: the default plan or one
// the set defines.
func (s *Set) HasPlan(plan string) bool {
	_, ok := s.Plans[plan]
	return ok || plan == DefaultPlan
}

// PlanNames lists the set's plans, the default first, then by name.
func (s *Set) PlanNames() []string {
	return append([]string{DefaultPlan}, slices.Sorted(maps.Keys(s.Plans))...)
}

// OverrideLimits validates an override of rule for one app and returns the
// limits it gives.
func (s *Set) OverrideLimits(rule string, spec LimitsSpec) ([]Limit, error) {
	r := s.Rule(rule)
	if r == nil {
		return nil, fmt.Errorf("no rule %q in force", rule)
	}
	return perAppLimits(r, spec)
}

// perAppLimits validates spec as rule r's limits for one app.
func perAppLimits(r *Rule, spec LimitsSpec) ([]Limit, error) {
	if !slices.Contains(r.Dimensions, "app_id") {
		return nil, fmt.Errorf("rule %q is not counted per app (no app_id dimension): plans and overrides cannot change it", r.Name)
	}
	ls, err := spec.Resolve(r)
	if err != nil {
		return nil, err
	}
	if err := checkLimits(r.Algorithm, ls); err != nil {
		return nil, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	return ls, nil
}

// resolvePlans validates plans against rules and returns each plan's
// limits by rule.
func resolvePlans(rs []Rule, plans map[string]Plan) (map[string]map[string][]Limit, error) {
	if len(plans) > MaxPlans {
		return nil, fmt.Errorf("plans: %d plans, at most %d allowed", len(plans), MaxPlans)
	}
	out := make(map[string]map[string][]Limit, len(plans))
	for _, name := range slices.Sorted(maps.Keys(plans)) {
		if !ValidName(name) {
			return nil, fmt.Errorf("plan %q: name must match [a-z][a-z0-9_]{0,31}", name)
		}
		if name == DefaultPlan {
			return nil, fmt.Errorf("plan %q: the default plan is the rules' own limits and cannot be defined", name)
		}
		byRule := make(map[string][]Limit, len(plans[name]))
		for _, rule := range slices.Sorted(maps.Keys(plans[name])) {
			i := slices.IndexFunc(rs, func(r Rule) bool { return r.Name == rule })
			if i < 0 {
				return nil, fmt.Errorf("plan %q: no rule %q", name, rule)
			}
			ls, err := perAppLimits(&rs[i], plans[name][rule])
			if err != nil {
				return nil, fmt.Errorf("plan %q: %w", name, err)
			}
			byRule[rule] = ls
		}
		out[name] = byRule
	}
	return out, nil
}

func clonePlans(plans map[string]Plan) map[string]Plan {
	if len(plans) == 0 {
		return nil
	}
	out := make(map[string]Plan, len(plans))
	for name, p := range plans {
		q := make(Plan, len(p))
		for rule, spec := range p {
			spec.Limits = slices.Clone(spec.Limits)
			q[rule] = spec
		}
		out[name] = q
	}
	return out
}

// Assignments is which plan each app is on and the overrides of its rules'
// limits, as every instance shares them (package appplans). An app in
// neither map is on the default plan.
type Assignments struct {
	Seq       int64                            // the shared store's sequence they are from
	Plans     map[string]string                // app -> plan
	Overrides map[string]map[string]LimitsSpec // app -> rule -> limits
}

// AppPolicy is one app's plan and overrides.
type AppPolicy struct {
	Plan      string
	Overrides map[string]LimitsSpec
}

// Policy returns app's plan (DefaultPlan when none is set) and overrides.
func (a *Assignments) Policy(app string) AppPolicy {
	p := AppPolicy{Plan: DefaultPlan}
	if a == nil {
		return p
	}
	if name, ok := a.Plans[app]; ok {
		p.Plan = name
	}
	p.Overrides = a.Overrides[app]
	return p
}

// LimitsFor returns the limits rule r has for an app with policy p under
// set s: the override's, else the plan's, else the rule's own; and where
// they come from ("override", the plan's name, or DefaultPlan).
func (s *Set) LimitsFor(r *Rule, p AppPolicy) ([]Limit, string) {
	if spec, ok := p.Overrides[r.Name]; ok {
		if ls, err := perAppLimits(r, spec); err == nil {
			return ls, "override"
		}
	}
	if ls, ok := s.PlanLimits(p.Plan, r.Name); ok {
		return ls, p.Plan
	}
	return r.EffectiveLimits(), DefaultPlan
}
