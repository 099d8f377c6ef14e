package api

import (
	"strconv"

	"github.com/quota-platform/quota/api/decide"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/rules"
)

// draftHeaders adds the RateLimit-Policy and RateLimit structured fields
// of draft-ietf-httpapi-ratelimit-headers (-11): one list item per limit
// of the decision, named after its rule, e.g.
//
//	RateLimit-Policy: "app_ip_hourly";q=10000;w=3600
//	RateLimit: "app_ip_hourly";r=9999;t=3540
//
// A rule with several limits gives one item per limit, named
// "rule/window" so that each RateLimit item names exactly one policy.
func draftHeaders(h *answerHeaders, d *limiter.Decision) {
	if len(d.Entries) == 0 {
		return
	}
	policy := make([]byte, 0, 48*len(d.Entries))
	limit := make([]byte, 0, 40*len(d.Entries))
	for i := range d.Entries {
		e := &d.Entries[i]
		if i > 0 {
			policy = append(policy, ", "...)
			limit = append(limit, ", "...)
		}
		policy = appendPolicyName(policy, d, i)
		policy = append(policy, ";q="...)
		policy = strconv.AppendInt(policy, max(0, e.Limit), 10)
		policy = append(policy, ";w="...)
		policy = strconv.AppendInt(policy, max(1, decide.CeilSeconds(rules.Duration(e.Window).Nominal())), 10) // a calendar period: its usual length

		limit = appendPolicyName(limit, d, i)
		limit = append(limit, ";r="...)
		limit = strconv.AppendInt(limit, max(0, e.Remaining), 10)
		limit = append(limit, ";t="...)
		limit = strconv.AppendInt(limit, max(0, decide.CeilSeconds(e.ResetAfter)), 10)
	}
	h.add("Ratelimit-Policy", policy) // textproto's canonical forms
	h.add("Ratelimit", limit)
}

// appendPolicyName appends entry i's policy name as an sf-string: its rule
// name, with "/window" when the rule has other limits in d.
func appendPolicyName(b []byte, d *limiter.Decision, i int) []byte {
	e := &d.Entries[i]
	name := e.Rule
	for j := range d.Entries {
		if j != i && d.Entries[j].Rule == e.Rule {
			name += "/" + rules.Duration(e.Window).String()
			break
		}
	}
	return appendSFString(b, name)
}

// appendSFString appends s as a structured-field String (RFC 9651 4.1.6):
// printable ASCII in quotes, with '"' and '\' escaped. Rule names and
// windows are printable ASCII; any other byte is dropped rather than sent
// as an invalid field.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c >= 0x20 && c <= 0x7e:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
