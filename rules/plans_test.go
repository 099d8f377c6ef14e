package rules_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/quota-platform/quota/rules"
)

const plansFile = `
rules:
  - name: app_daily
    dimensions: [app_id]
    limit: 10000
    window: day
    algorithm: fixed_window
  - name: app_user_burst
    dimensions: [app_id, user_id]
    limits: [{limit: 10, window: 1s}, {limit: 1000, window: 1h}]
    algorithm: sliding_window
  - name: ip_hourly
    dimensions: [ip]
    limit: 100
    window: 1h
    algorithm: fixed_window
plans:
  pro:     {app_daily: 1000000}
  partner: {app_daily: {limits: [{limit: 100, window: 1s}, {limit: 50000000, window: month}]}, app_user_burst: {limits: [{limit: 50, window: 1s}]}}
`

func TestParseYAML_PlansGiveTheirAppsTheirLimits(t *testing.T) {
	t.Parallel()
	set, err := rules.ParseYAML([]byte(plansFile))
	if err != nil {
		t.Fatal(err)
	}
	daily := set.Rule("app_daily")
	cases := []struct {
		policy rules.AppPolicy
		rule   string
		want   string // limits as limit/window pairs
		from   string
	}{
		{rules.AppPolicy{Plan: rules.DefaultPlan}, "app_daily", "10000/day", rules.DefaultPlan},
		{rules.AppPolicy{Plan: "pro"}, "app_daily", "1000000/day", "pro"},
		{rules.AppPolicy{Plan: "partner"}, "app_daily", "100/1s 50000000/month", "partner"},
		{rules.AppPolicy{Plan: "pro"}, "app_user_burst", "10/1s 1000/1h", rules.DefaultPlan},
		{rules.AppPolicy{Plan: "partner"}, "app_user_burst", "50/1s", "partner"},
		{rules.AppPolicy{Plan: "pro", Overrides: map[string]rules.LimitsSpec{"app_daily": {Limit: 7}}}, "app_daily", "7/day", "override"},
		{rules.AppPolicy{Plan: "gone"}, "app_daily", "10000/day", rules.DefaultPlan},
	}
	for _, c := range cases {
		ls, from := set.LimitsFor(set.Rule(c.rule), c.policy)
		var got []string
		for _, l := range ls {
			got = append(got, strings.Join([]string{itoa(l.Limit), l.Window.String()}, "/"))
		}
		if strings.Join(got, " ") != c.want || from != c.from {
			t.Errorf("%+v %s: %v from %s, want %s from %s", c.policy, c.rule, got, from, c.want, c.from)
		}
	}
	if daily.Window != rules.Day || !set.HasPlan("pro") || !set.HasPlan(rules.DefaultPlan) || set.HasPlan("gold") {
		t.Fatalf("window %s, plans %v", daily.Window, set.PlanNames())
	}
	// The version covers the plans: another plan limit, another version.
	other, err := rules.ParseYAML([]byte(strings.Replace(plansFile, "pro:     {app_daily: 1000000}", "pro:     {app_daily: 1000001}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if other.Version == set.Version {
		t.Fatal("a plan's limit changed and the version did not")
	}
	// The file round-trips, plans included.
	b, err := set.MarshalYAML()
	if err != nil {
		t.Fatal(err)
	}
	again, err := rules.ParseYAML(b)
	if err != nil || again.Version != set.Version {
		t.Fatalf("round trip: %v, version %s want %s\n%s", err, again.Version, set.Version, b)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestParseYAML_RefusesBadPlansAndCalendarMisuse(t *testing.T) {
	t.Parallel()
	base := "rules:\n  - {name: app_daily, dimensions: [app_id], limit: 10, window: day, algorithm: fixed_window}\n  - {name: ip_hourly, dimensions: [ip], limit: 10, window: 1h, algorithm: fixed_window}\n"
	cases := map[string]string{
		base + "plans:\n  pro: {nope: 5}\n":                                                                  `no rule "nope"`,
		base + "plans:\n  default: {app_daily: 5}\n":                                                         "default plan",
		base + "plans:\n  Pro: {app_daily: 5}\n":                                                             "name must match",
		base + "plans:\n  pro: {app_daily: 0}\n":                                                             "limit must be between",
		base + "plans:\n  pro: {app_daily: -3}\n":                                                            "limit must be between",
		base + "plans:\n  pro: {app_daily: 1.5}\n":                                                           "positive integer",
		base + "plans:\n  pro: {ip_hourly: 50}\n":                                                            "not counted per app",
		base + "plans:\n  pro: {app_daily: {limit: 5, window: fortnight}}\n":                                 "invalid duration",
		"rules:\n  - {name: a, dimensions: [app_id], limit: 10, window: month, algorithm: sliding_window}\n": "only fixed_window",
		"rules:\n  - {name: a, dimensions: [app_id], limit: 10, window: day, algorithm: token_bucket}\n":     "only fixed_window",
	}
	for y, want := range cases {
		if _, err := rules.ParseYAML([]byte(y)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error with %q", y, err, want)
		}
	}
}

func TestOverrideLimits_ValidatesAgainstTheRule(t *testing.T) {
	t.Parallel()
	set, err := rules.ParseYAML([]byte(plansFile))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		rule string
		spec rules.LimitsSpec
		want string // "" = accepted
	}{
		{"app_daily", rules.LimitsSpec{Limit: 5}, ""},
		{"app_daily", rules.LimitsSpec{Limits: []rules.Limit{{Limit: 5, Window: rules.Month}}}, ""},
		{"app_daily", rules.LimitsSpec{Limit: 0}, "limit must be between"},
		{"app_user_burst", rules.LimitsSpec{Limit: 5}, "has 2 limits"},
		{"app_user_burst", rules.LimitsSpec{Limits: []rules.Limit{{Limit: 5, Window: rules.Day}}}, "only fixed_window"},
		{"ip_hourly", rules.LimitsSpec{Limit: 5}, "not counted per app"},
		{"missing", rules.LimitsSpec{Limit: 5}, "no rule"},
	}
	for _, c := range cases {
		_, err := set.OverrideLimits(c.rule, c.spec)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s %+v: %v, want %q", c.rule, c.spec, err, c.want)
		}
	}
}
