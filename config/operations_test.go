package config_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/quota-platform/quota/config"
)

func TestLoad_LogLevelAndTracingEndpoint(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		env      map[string]string
		level    slog.Level
		endpoint string
		errNames string // "" = accepted
	}{
		{"defaults: info, tracing off", nil, slog.LevelInfo, "", ""},
		{"each level, any case", map[string]string{"QUOTA_LOG_LEVEL": "DEBUG"}, slog.LevelDebug, "", ""},
		{"warn", map[string]string{"QUOTA_LOG_LEVEL": "warn"}, slog.LevelWarn, "", ""},
		{"error", map[string]string{"QUOTA_LOG_LEVEL": "error"}, slog.LevelError, "", ""},
		{"an unknown level stops start-up", map[string]string{"QUOTA_LOG_LEVEL": "verbose"}, 0, "", "QUOTA_LOG_LEVEL"},
		{"slog's offsets are not levels", map[string]string{"QUOTA_LOG_LEVEL": "info+2"}, 0, "", "QUOTA_LOG_LEVEL"},
		{"the standard OTLP variable turns tracing on", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, slog.LevelInfo, "http://collector:4318", ""},
		{"QUOTA_OTEL_ENDPOINT wins over the standard ones", map[string]string{
			"QUOTA_OTEL_ENDPOINT": "https://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:4318/v1/traces", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
		}, slog.LevelInfo, "https://a:4318", ""},
		{"the traces-only variable wins over the general one", map[string]string{
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:4318/v1/traces", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
		}, slog.LevelInfo, "http://b:4318/v1/traces", ""},
		{"an endpoint that is not a URL stops start-up", map[string]string{"QUOTA_OTEL_ENDPOINT": "collector:4318"}, 0, "", "QUOTA_OTEL_ENDPOINT"},
		{"a bad standard endpoint is named as such", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "grpc://x"}, 0, "", "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"a bad traces endpoint is named as such, the general one set too", map[string]string{
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "grpc://x", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
		}, 0, "", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := config.Load(func(k string) string { return tc.env[k] })
			if tc.errNames != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errNames) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("error %v, want one line naming %s", err, tc.errNames)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.LogLevel != tc.level || s.OTelEndpoint != tc.endpoint {
				t.Fatalf("level %v endpoint %q, want %v %q", s.LogLevel, s.OTelEndpoint, tc.level, tc.endpoint)
			}
		})
	}
}
