package deploy

import (
	"regexp"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// matcher is one label matcher of a selector: name, operator, value.
var matcher = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!=|!~|=)\s*"((?:[^"\\]|\\.)*)"`)

// selectors are the metric names of expr with the label matchers of each
// selector of that name (nil for a bare name).
var selector = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^{}]*)\}`)

// labelMatchers returns, per metric name of expr, its selectors' label
// matchers that name a fixed value (= or =~ without a Grafana variable),
// on labels other than job and instance (which Prometheus adds).
func labelMatchers(expr string) map[string][][3]string {
	out := map[string][][3]string{}
	for _, s := range selector.FindAllStringSubmatch(expr, -1) {
		for _, m := range matcher.FindAllStringSubmatch(s[2], -1) {
			label, op, val := m[1], m[2], strings.ReplaceAll(m[3], `\\`, `\`)
			if label == "job" || label == "instance" || strings.Contains(val, "$") || (op != "=" && op != "=~") {
				continue
			}
			out[s[1]] = append(out[s[1]], [3]string{label, op, val})
		}
	}
	return out
}

func TestLabelMatchers_KeepFixedValuesOnly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ expr, want string }{
		{`quota_dependency_up{dependency="redis"} == 0`, `quota_dependency_up dependency=redis`},
		{`rate(x_total{job=~"$job",result="error"}[5m])`, `x_total result=error`},
		{`sum(rate(r{route=~"/v1/check.*", code=~"5.."}[5m]))`, `r route=~/v1/check.* r code=~5..`},
		{`y{job=~"$job"} + y{a!="b"}`, ``},
	} {
		var got []string
		for name, ms := range labelMatchers(tc.expr) {
			for _, m := range ms {
				got = append(got, name+" "+m[0]+m[1]+m[2])
			}
		}
		sort.Strings(got)
		want := strings.Fields(tc.want)
		var w []string
		for i := 0; i+1 < len(want); i += 2 {
			w = append(w, want[i]+" "+want[i+1])
		}
		sort.Strings(w)
		if strings.Join(got, ",") != strings.Join(w, ",") {
			t.Errorf("labelMatchers(%q) = %q, want %q", tc.expr, got, w)
		}
	}
}

// A freshly started quotad, before any check, flush or cycle, already
// exports every series the shipped dashboard and alert rules name, with the
// label values they select (at zero until something happens): a fresh
// deployment shows zeros, not "No data", and absent() tells broken from
// not yet.
func TestFirstScrape_EverySeriesTheDashboardAndAlertsUseExistsAtStart(t *testing.T) {
	t.Parallel()
	_, dsn0 := testenv.MySQL(t)
	_, dsn1 := testenv.MySQL(t)
	q := testenv.StartQuotad(t,
		"QUOTA_MYSQL_SHARDS="+dsn0+","+dsn1,
		"QUOTA_REDIS_KEY_PREFIX=t:"+testenv.RandomHex(6)+":",
		"QUOTA_GRPC_LISTEN=127.0.0.1:0",
	)
	text, err := q.MetricsText()
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	// series: exported name -> the label sets of its samples.
	series := map[string][]map[string]string{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			names := []string{name}
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				names = append(names, name+"_bucket", name+"_sum", name+"_count")
			case dto.MetricType_SUMMARY:
				names = append(names, name+"_sum", name+"_count")
			}
			for _, n := range names {
				series[n] = append(series[n], labels)
			}
		}
	}
	sources := exprs(t)
	keys := make([]string, 0, len(sources))
	for k := range sources {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	checked := 0
	for _, where := range keys {
		for _, e := range sources[where] {
			for _, n := range metricNames(e) {
				if scrapeSeries[n] {
					continue
				}
				checked++
				if len(series[n]) == 0 {
					t.Errorf("%s: %s is absent from a fresh quotad's first scrape (expression %q)", where, n, e)
					continue
				}
				for _, m := range labelMatchers(e)[n] {
					re := regexp.MustCompile("^(?:" + m[2] + ")$")
					found := false
					for _, ls := range series[n] {
						v, ok := ls[m[0]]
						if ok && (m[1] == "=" && v == m[2] || m[1] == "=~" && re.MatchString(v)) {
							found = true
							break
						}
					}
					if !found {
						t.Errorf("%s: no series of %s with %s%s%q at start (expression %q)", where, n, m[0], m[1], m[2], e)
					}
				}
			}
		}
	}
	if checked < 30 {
		t.Fatalf("only %d metric uses checked: is the extraction broken?", checked)
	}
}
