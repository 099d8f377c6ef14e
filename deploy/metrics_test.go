package deploy

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// scrapeSeries are series Prometheus makes itself when it scrapes.
var scrapeSeries = map[string]bool{"up": true}

var (
	quoted   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	braces   = regexp.MustCompile(`\{[^{}]*\}`)
	brackets = regexp.MustCompile(`\[[^\[\]]*\]`)
	grouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	keywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true,
		"without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true}
)

// metricNames are the metric names a PromQL expression selects: label
// matchers, ranges, grouping clauses and strings removed, identifiers
// followed by "(" (functions, aggregations) and keywords left out.
func metricNames(expr string) []string {
	s := quoted.ReplaceAllString(expr, `""`)
	s = braces.ReplaceAllString(s, " ")
	s = brackets.ReplaceAllString(s, " ")
	s = grouping.ReplaceAllString(s, " ")
	var names []string
	isIdent := func(c byte, first bool) bool {
		return c == '_' || c == ':' || (c|0x20 >= 'a' && c|0x20 <= 'z') || (!first && c >= '0' && c <= '9')
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c >= '0' && c <= '9' || c == '.' || c == '$':
			// a number (1e9, 0x1f) or a Grafana variable: skip it whole
			for i++; i < len(s) && (isIdent(s[i], false) || s[i] == '.'); i++ {
			}
		case isIdent(c, true):
			j := i + 1
			for j < len(s) && isIdent(s[j], false) {
				j++
			}
			name := s[i:j]
			k := j
			for k < len(s) && s[k] == ' ' || k < len(s) && s[k] == '\n' {
				k++
			}
			if !(k < len(s) && s[k] == '(') && !keywords[strings.ToLower(name)] && !slices.Contains(names, name) {
				names = append(names, name)
			}
			i = j
		default:
			i++
		}
	}
	return names
}

func TestMetricNames_FromPromQL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ expr, want string }{
		{`up{job="quotad"} == 0`, "up"},
		{`sum by (instance, le) (rate(quota_check_duration_seconds_bucket{route="/v1/check"}[5m]))`, "quota_check_duration_seconds_bucket"},
		{`time() - a_seconds > 26 * 3600 and on (instance) time() - b_seconds > 1e9`, "a_seconds b_seconds"},
		{`increase(x_total{result="error"}[26h]) > 0 unless on (instance) increase(y_total[$__rate_interval]) > 0`, "x_total y_total"},
		{`sum(rate(c_total{job=~"$job",code=~"5.."}[$__rate_interval])) / ignoring(code) group_left sum(d)`, "c_total d"},
		{"histogram_quantile(0.99, sum by (le) (rate(h_bucket[5m])))\n  > 0.05", "h_bucket"},
	} {
		if got := strings.Join(metricNames(tc.expr), " "); got != tc.want {
			t.Errorf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

// exprs are the PromQL expressions of the dashboard (panels, variables)
// and of the alert rules, by where they come from.
func exprs(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name  string
				Query any
			}
		}
	}
	if err := json.Unmarshal(readFile(t, "grafana/quota-dashboard.json"), &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			out["dashboard panel "+p.Title] = append(out["dashboard panel "+p.Title], tg.Expr)
		}
	}
	labelValues := regexp.MustCompile(`label_values\(\s*([^,)]+)\s*,`)
	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			if m := labelValues.FindStringSubmatch(q["query"].(string)); m != nil {
				out["dashboard variable "+v.Name] = []string{m[1]}
			}
		}
	}
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	if err := yaml.Unmarshal(readFile(t, "prometheus/alerts.yaml"), &rules); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out["alert "+r.Alert] = append(out["alert "+r.Alert], r.Expr)
		}
	}
	return out
}

// Every metric the dashboard and the alerts use is one a running quotad
// exports (after a check and an analytics flush, so that series created on
// first use exist).
func TestMetricNames_DashboardAndAlertsUseOnlyExportedMetrics(t *testing.T) {
	t.Parallel()
	_, dsn0 := testenv.MySQL(t)
	_, dsn1 := testenv.MySQL(t)
	q := testenv.StartQuotad(t,
		"QUOTA_MYSQL_SHARDS="+dsn0+","+dsn1,
		"QUOTA_REDIS_KEY_PREFIX=t:"+testenv.RandomHex(6)+":",
		"QUOTA_ANALYTICS_FLUSH=200ms",
	)
	resp, err := http.Post(q.URL+"/v1/check", "application/json",
		strings.NewReader(`{"app_id":"a","ip":"10.0.0.1","user_id":"u","interface_id":"i"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("check: %d", resp.StatusCode)
	}
	var families map[string]*dto.MetricFamily
	for deadline := time.Now().Add(15 * time.Second); ; {
		text, err := q.MetricsText()
		if err != nil {
			t.Fatal(err)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		if families, err = p.TextToMetricFamilies(strings.NewReader(text)); err != nil {
			t.Fatalf("/metrics: %v", err)
		}
		if families["quota_analytics_rows_written_total"] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no analytics flush within 15 s: %s", q.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	exported := map[string]bool{}
	for name, f := range families {
		exported[name] = true
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			exported[name+"_bucket"], exported[name+"_sum"], exported[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			exported[name+"_sum"], exported[name+"_count"] = true, true
		}
	}
	used := 0
	sources := exprs(t)
	keys := make([]string, 0, len(sources))
	for k := range sources {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, where := range keys {
		for _, e := range sources[where] {
			names := metricNames(e)
			if len(names) == 0 {
				t.Errorf("%s: no metric in %q", where, e)
			}
			for _, n := range names {
				used++
				if !exported[n] && !scrapeSeries[n] {
					t.Errorf("%s uses %s, which quotad does not export (expression %q)", where, n, e)
				}
			}
		}
	}
	if used < 30 {
		t.Fatalf("only %d metric uses found: is the extraction broken?", used)
	}
}
