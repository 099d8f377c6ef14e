package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/quota-platform/quota/analytics"
	"github.com/quota-platform/quota/api"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

func loadOpenAPI(t *testing.T, b []byte) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		t.Fatalf("load the OpenAPI document: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the OpenAPI document is invalid: %v", err)
	}
	return doc
}

func TestOpenAPI_DocumentIsValidAndNamesEveryRoute(t *testing.T) {
	t.Parallel()
	b, err := api.OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	doc := loadOpenAPI(t, b)
	// Every route of a server with analytics on is documented (the
	// dashboard's assets are one page).
	for _, r := range serverRoutes() {
		p := r[1]
		if strings.HasPrefix(p, "/dashboard") {
			p = "/dashboard/"
		}
		for _, seg := range []string{"app_id", "interface_id", "user_id", "id"} {
			p = strings.ReplaceAll(p, ":"+seg, "{"+seg+"}")
		}
		item := doc.Paths.Find(p)
		if item == nil {
			t.Errorf("route %s %s is not in the OpenAPI document", r[0], r[1])
			continue
		}
		if item.GetOperation(r[0]) == nil && !strings.HasPrefix(r[1], "/dashboard") {
			t.Errorf("route %s %s: the document has no %s operation", r[0], r[1], r[0])
		}
	}
}

// serverRoutes lists method and path of every route of a server with
// analytics on, from its own router (the recorder is only named, never
// called: no request is served).
func serverRoutes() [][2]string {
	s := api.New(api.Deps{Analytics: &analytics.Stats{}})
	var out [][2]string
	for _, r := range s.Echo().Routes() {
		switch r.Method {
		case "echo_route_not_found": // a group's own 404 route
			continue
		case "CONNECT", "PROPFIND", "REPORT": // /v1/auth's Any: methods OpenAPI 3.0 has no field for
			continue
		}
		out = append(out, [2]string{r.Method, r.Path})
	}
	return out
}

// openapiCase is one real request and the status it must get.
type openapiCase struct {
	name        string
	method      string
	path        string // with its query
	header      []string
	contentType string
	body        string
	status      int
}

func TestOpenAPI_RealAnswersOfARunningQuotadMatchTheDocument(t *testing.T) {
	t.Parallel()
	const admin = "openapi-admin-token-0123456789"
	_, prefix := testenv.Redis(t)
	_, dsn := testenv.MySQL(t)
	rulesPath := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(defaultRules), 0o644); err != nil {
		t.Fatal(err)
	}
	q := testenv.StartQuotad(t, "QUOTA_REDIS_ADDRS="+testenv.RedisAddr(), "QUOTA_REDIS_KEY_PREFIX="+prefix,
		"QUOTA_MYSQL_SHARDS="+dsn, "QUOTA_RULES="+rulesPath, "QUOTA_ADMIN_TOKEN="+admin,
		"QUOTA_ANALYTICS_FLUSH=200ms", "QUOTA_ANALYTICS_HOLD_MINUTE=off", "QUOTA_HEADERS=both")

	// The document the server serves is the one the test validates against.
	resp, err := http.Get(q.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	served, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("/openapi.json: %d %v", resp.StatusCode, resp.Header)
	}
	doc := loadOpenAPI(t, served)
	doc.Servers = openapi3.Servers{{URL: q.URL}}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range []string{"text/html", "image/svg+xml"} {
		openapi3filter.RegisterBodyDecoder(ct, func(r io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
			b, err := io.ReadAll(r)
			return string(b), err
		})
	}

	adminAuth := []string{"Authorization", "Bearer " + admin}
	today := time.Now().UTC().Format("2006-01-02")
	call := `{"app_id":"oa","ip":"192.0.2.7","user_id":"u1","interface_id":"users.get"}`
	deny := `{"app_id":"oa","ip":"192.0.2.7","user_id":"u1","interface_id":"users.get","cost":1000}`
	auth := []string{"X-App-Id", "oa", "X-Real-IP", "192.0.2.8", "X-User-Id", "u2", "X-Interface-Id", "users.get"}
	cases := []openapiCase{
		{"check allowed", "POST", "/v1/check", nil, "application/json", call, 200},
		{"check denied", "POST", "/v1/check", nil, "application/json", deny, 429},
		{"check bad dimension", "POST", "/v1/check", nil, "application/json", `{"App":"x"}`, 400},
		{"check not JSON", "POST", "/v1/check", nil, "text/plain", call, 415},
		{"check too large", "POST", "/v1/check", nil, "application/json", `{"a":"` + strings.Repeat("x", 70000) + `"}`, 413},
		{"batch", "POST", "/v1/check/batch", nil, "application/json", `{"checks":[` + call + `,` + deny + `]}`, 200},
		{"batch empty", "POST", "/v1/check/batch", nil, "application/json", `{"checks":[]}`, 400},
		{"auth allowed", "GET", "/v1/auth", auth, "", "", 200},
		{"auth by POST", "POST", "/v1/auth", auth, "", "", 200},
		{"auth denied", "GET", "/v1/auth", append([]string{"X-Quota-Cost", "1000"}, auth...), "", "", 429},
		{"auth no header", "GET", "/v1/auth", nil, "", "", 400},
		{"rules", "GET", "/v1/rules", nil, "", "", 200},
		{"put rules", "PUT", "/v1/rules", adminAuth, "application/json", `{"rules":[{"name":"app_ip_hourly","dimensions":["app_id","ip"],"limit":10000,"window":"1h","algorithm":"fixed_window"},{"name":"app_user_iface_hourly","dimensions":["app_id","user_id","interface_id"],"limit":1000,"window":"1h","algorithm":"fixed_window"}]}`, 200},
		{"put rules invalid", "PUT", "/v1/rules", adminAuth, "application/json", `{"rules":[{"name":"Bad"}]}`, 400},
		{"put rules no token", "PUT", "/v1/rules", nil, "application/json", `{"rules":[]}`, 401},
		{"put rules wrong token", "PUT", "/v1/rules", []string{"Authorization", "Bearer not-the-admin-token"}, "application/json", `{"rules":[]}`, 403},
		{"create app", "POST", "/v1/admin/apps", adminAuth, "application/json", `{"app_id":"oa"}`, 201},
		{"create app again", "POST", "/v1/admin/apps", adminAuth, "application/json", `{"app_id":"oa"}`, 409},
		{"create app bad body", "POST", "/v1/admin/apps", adminAuth, "application/json", `{"app":"oa"}`, 400},
		{"apps", "GET", "/v1/apps", adminAuth, "", "", 200},
		{"apps no token", "GET", "/v1/apps", nil, "", "", 401},
		{"app stats", "GET", "/v1/apps/oa/stats?date=" + today, adminAuth, "", "", 200},
		{"app stats bad date", "GET", "/v1/apps/oa/stats?date=yesterday", adminAuth, "", "", 400},
		{"interface stats", "GET", "/v1/apps/oa/interfaces/users.get/stats", adminAuth, "", "", 200},
		{"user stats", "GET", "/v1/apps/oa/users/u1/stats?date=" + today, adminAuth, "", "", 200},
		{"series", "GET", "/v1/apps/oa/series?interface_id=users.get", adminAuth, "", "", 200},
		{"series bad range", "GET", "/v1/apps/oa/series?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z", adminAuth, "", "", 400},
		{"series svg", "GET", "/v1/apps/oa/series.svg", adminAuth, "", "", 200},
		{"uniques", "GET", "/v1/apps/oa/uniques", adminAuth, "", "", 200},
		{"uniques bad date", "GET", "/v1/apps/oa/uniques?from=x", adminAuth, "", "", 400},
		{"tiers", "GET", "/v1/admin/tiers", adminAuth, "", "", 200},
		{"tiers no token", "GET", "/v1/admin/tiers", nil, "", "", 401},
		{"migrate", "POST", "/v1/admin/migrate", adminAuth, "", "", 200},
		{"rebuild filters", "POST", "/v1/admin/tiers/rebuild-filters", adminAuth, "", "", 200},
		{"compact filters", "POST", "/v1/admin/tiers/compact-filters", adminAuth, "", "", 200},
		{"healthz", "GET", "/healthz", nil, "", "", 200},
		{"readyz", "GET", "/readyz", nil, "", "", 200},
		{"metrics", "GET", "/metrics", nil, "", "", 200},
		{"openapi", "GET", "/openapi.json", nil, "", "", 200},
		{"dashboard", "GET", "/dashboard/", nil, "", "", 200},
	}
	var appKey string
	for _, tc := range cases {
		body := validateAgainst(t, router, q.URL, tc, tc.header)
		if tc.name == "create app" {
			var k struct{ Key string }
			_ = json.Unmarshal(body, &k)
			appKey = k.Key
		}
	}
	// An app's key reads its own app and is refused another's.
	validateAgainst(t, router, q.URL, openapiCase{"own app", "GET", "/v1/apps/oa/stats", nil, "", "", 200}, []string{"Authorization", "Bearer " + appKey})
	validateAgainst(t, router, q.URL, openapiCase{"other app", "GET", "/v1/apps/other/stats", nil, "", "", 403}, []string{"Authorization", "Bearer " + appKey})
}

// validateAgainst sends tc, checks its status, and validates the request
// (when it is meant to succeed) and the answer against the document.
func validateAgainst(t *testing.T, router routers.Router, base string, tc openapiCase, header []string) []byte {
	t.Helper()
	ctx := context.Background()
	req, err := http.NewRequestWithContext(ctx, tc.method, base+tc.path, strings.NewReader(tc.body))
	if err != nil {
		t.Fatal(err)
	}
	if tc.contentType != "" {
		req.Header.Set("Content-Type", tc.contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	route, params, err := router.FindRoute(req)
	if err != nil {
		t.Errorf("%s: %s %s is not in the document: %v", tc.name, tc.method, tc.path, err)
		return nil
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true, MultiError: true}}
	if tc.status < 300 {
		check := req.Clone(ctx)
		check.Body = io.NopCloser(strings.NewReader(tc.body))
		vin := *in
		vin.Request = check
		if err := openapi3filter.ValidateRequest(ctx, &vin); err != nil {
			t.Errorf("%s: the request does not match the document: %v", tc.name, err)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != tc.status {
		t.Errorf("%s: %s %s answered %d, want %d: %.300s", tc.name, tc.method, tc.path, resp.StatusCode, tc.status, body)
		return body
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body: io.NopCloser(bytes.NewReader(body)), Options: in.Options}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		t.Errorf("%s: %s %s: the %d answer does not match the document: %v", tc.name, tc.method, tc.path, resp.StatusCode, err)
	}
	return body
}
