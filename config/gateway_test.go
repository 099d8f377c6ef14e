package config_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/quota-platform/quota/config"
)

func TestGateway_DefaultsAreTheDesignsHeadersAnd429(t *testing.T) {
	t.Parallel()
	s, err := config.Load(envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := []config.AuthHeader{{"app_id", "X-App-Id"}, {"user_id", "X-User-Id"}, {"interface_id", "X-Interface-Id"}, {"ip", "X-Real-Ip"}}
	if !reflect.DeepEqual(s.AuthHeaders, want) || s.AuthDenyStatus != 429 || s.Headers != config.HeadersLegacy {
		t.Fatalf("gateway defaults %+v", s.Gateway)
	}
}

func TestGateway_ReadsTheEnvironment(t *testing.T) {
	t.Parallel()
	s, err := config.Load(envOf(map[string]string{
		"QUOTA_AUTH_HEADERS":     " app_id = x-api-app , tenant=X-Tenant,",
		"QUOTA_AUTH_DENY_STATUS": "403",
		"QUOTA_HEADERS":          "both",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := []config.AuthHeader{{"app_id", "X-Api-App"}, {"tenant", "X-Tenant"}}
	if !reflect.DeepEqual(s.AuthHeaders, want) || s.AuthDenyStatus != 403 || !s.Headers.Draft() || !s.Headers.Legacy() {
		t.Fatalf("%+v", s.Gateway)
	}
}

func TestGateway_InvalidSettingsGiveOneClearLine(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, value string }{
		{"QUOTA_AUTH_HEADERS", "app_id"},
		{"QUOTA_AUTH_HEADERS", "app_id="},
		{"QUOTA_AUTH_HEADERS", "=X-App"},
		{"QUOTA_AUTH_HEADERS", "App=X-App"},
		{"QUOTA_AUTH_HEADERS", "cost=X-Cost"},
		{"QUOTA_AUTH_HEADERS", "app_id=X App"},
		{"QUOTA_AUTH_HEADERS", "app_id=X-App:"},
		{"QUOTA_AUTH_HEADERS", "app_id=X-A,app_id=X-B"},
		{"QUOTA_AUTH_HEADERS", "a=X-A,b=x-a"},
		{"QUOTA_AUTH_HEADERS", ",,"},
		{"QUOTA_AUTH_DENY_STATUS", "200"},
		{"QUOTA_AUTH_DENY_STATUS", "503"},
		{"QUOTA_AUTH_DENY_STATUS", "400"},
		{"QUOTA_AUTH_DENY_STATUS", "401"},
		{"QUOTA_AUTH_DENY_STATUS", "forbidden"},
		{"QUOTA_HEADERS", "ietf"},
	}
	for _, tc := range cases {
		_, err := config.Load(envOf(map[string]string{tc.name: tc.value}))
		if err == nil {
			t.Errorf("%s=%q accepted", tc.name, tc.value)
			continue
		}
		if !strings.HasPrefix(err.Error(), tc.name) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s=%q: error %q should be one line starting with the setting", tc.name, tc.value, err)
		}
	}
}
