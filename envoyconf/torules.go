package envoyconf

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/quota-platform/quota/rules"
)

// QuotaRules translates envoy ratelimit files into quota rules where an
// exact equivalent exists: a node's path of keys becomes the rule's
// dimensions, its values the rule's match, its limit a fixed_window limit.
// Everything that has no exact equivalent is left out or flagged, one
// note each (for stderr). The rules are validated as a rules file is.
func QuotaRules(files []*File) (*rules.Set, []string) {
	t := translator{names: map[string]bool{}}
	t.note("quota has no domains and checks are flat dimension maps: a rule applies to any check that has its dimensions (extra dimensions included), where envoy matches a descriptor with exactly these entries in this order")
	for _, f := range files {
		t.walk(f.Domain, nil, f.Descriptors)
	}
	set, err := rules.NewSet(t.rules)
	if err != nil {
		// Every rule was validated alone; what is left is the set's size.
		t.note(fmt.Sprintf("the translated rules are not a valid set: %v", err))
		set, _ = rules.NewSet(nil)
	}
	return set, t.notes
}

type translator struct {
	rules []rules.Rule
	notes []string
	names map[string]bool
}

func (t *translator) note(s string) { t.notes = append(t.notes, s) }

type step struct{ key, value string }

func (t *translator) walk(domain string, path []step, descs []yamlDescriptor) {
	valued := map[string]bool{} // keys of this level that have value-specific siblings
	for _, d := range descs {
		if d.Value != "" {
			valued[d.Key] = true
		}
	}
	for _, d := range descs {
		p := append(append([]step(nil), path...), step{d.Key, d.Value})
		where := describe(domain, p)
		if d.RateLimit != nil {
			if d.Value == "" && valued[d.Key] {
				t.note(where + ": key-only limit with value-specific siblings; in quota it would also apply to those values (envoy uses the sibling instead): translated, but not exact for those values")
			}
			t.limit(domain, p, d, where)
		}
		t.walk(domain, p, d.Descriptors)
	}
}

func describe(domain string, p []step) string {
	parts := make([]string, len(p))
	for i, s := range p {
		parts[i] = s.key
		if s.value != "" {
			parts[i] += "=" + s.value
		}
	}
	return domain + ": " + strings.Join(parts, ", ")
}

func (t *translator) limit(domain string, p []step, d yamlDescriptor, where string) {
	rl := d.RateLimit
	switch {
	case rl.Unlimited:
		t.note(where + ": unlimited has no quota rule (a check no rule applies to is allowed); left out")
		return
	case len(rl.Replaces) > 0:
		t.note(where + ": replaces has no quota equivalent (every applying rule counts); left out")
		return
	case rl.RequestsPerUnit == 0:
		t.note(where + ": requests_per_unit 0 (deny all) has no quota equivalent (limits are at least 1); left out")
		return
	}
	r := rules.Rule{Algorithm: rules.FixedWindow, Shadow: d.ShadowMode, Limit: int64(rl.RequestsPerUnit)}
	v, _ := unitValue(rl.Unit)
	r.Window = rules.Duration(Window(v))
	if time.Duration(r.Window) > rules.MaxWindow {
		t.note(where + ": window over quota's 366 days; left out")
		return
	}
	for _, s := range p {
		if strings.HasSuffix(s.value, "*") {
			t.note(where + ": wildcard value " + s.value + " has no quota equivalent (match is exact); left out")
			return
		}
		r.Dimensions = append(r.Dimensions, s.key)
		if s.value != "" {
			if r.Match == nil {
				r.Match = map[string]string{}
			}
			r.Match[s.key] = s.value
		}
	}
	r.Name = t.name(domain, rl.Name, p)
	if _, err := rules.NewSet([]rules.Rule{r}); err != nil {
		t.note(fmt.Sprintf("%s: no quota equivalent (%v); left out", where, err))
		return
	}
	t.names[r.Name] = true
	t.rules = append(t.rules, r)
}

// name is the rate_limit's own name when it is a valid, unused rule name,
// else one made from the domain and the keys (with a hash when too long).
func (t *translator) name(domain, given string, p []step) string {
	if rules.ValidName(given) && !t.names[given] {
		return given
	}
	parts := []string{domain}
	for _, s := range p {
		parts = append(parts, s.key)
		if s.value != "" {
			parts = append(parts, s.value)
		}
	}
	n := sanitize(strings.Join(parts, "_"))
	if len(n) > 32 || t.names[n] || !rules.ValidName(n) {
		sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
		h := hex.EncodeToString(sum[:3])
		n = strings.TrimRight(n[:min(len(n), 25)], "_") + "_" + h
		if !rules.ValidName(n) {
			n = "r_" + h
		}
	}
	return n
}

func sanitize(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	out := strings.Trim(string(b), "_")
	if out == "" || out[0] < 'a' || out[0] > 'z' {
		out = "r_" + out
	}
	return out
}

func unitValue(s string) (Unit, bool) {
	v, ok := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(s)]
	return Unit(v), ok
}
