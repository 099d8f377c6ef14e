package config_test

import (
	"strings"
	"testing"

	"github.com/quota-platform/quota/config"
)

// Each bound of a validate tag: the values at the bound are accepted, those
// past it stop start-up with one line naming the variable and the value.
func TestLoad_Bounds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		ok   []string
		bad  []string
	}{
		{"QUOTA_REDIS_DB", []string{"0", "15"}, []string{"-1", "16"}},
		{"QUOTA_REDIS_TIMEOUT", []string{"1ms", "1m"}, []string{"0s", "-1s", "61s"}},
		{"QUOTA_REDIS_POOL_SIZE", []string{"1"}, []string{"0"}},
		{"QUOTA_MAX_IN_FLIGHT", []string{"1"}, []string{"0", "-4"}},
		{"QUOTA_TTL_JITTER", []string{"0s", "1h"}, []string{"-1ns", "61m"}},
		{"QUOTA_COALESCE", []string{"0", "256"}, []string{"-1", "257"}},
		{"QUOTA_DENY_CACHE_SIZE", []string{"0", "16777216"}, []string{"-1", "16777217"}},
		{"QUOTA_GC_HEAP_FLOOR_MB", []string{"0", "1048576"}, []string{"-1", "1048577"}},
		{"QUOTA_REDIS_WAIT_REPLICAS", []string{"0"}, []string{"-1", "17"}},
		{"QUOTA_ANALYTICS_FLUSH", []string{"100ms", "10m"}, []string{"99ms", "11m"}},
		{"QUOTA_ANALYTICS_BUFFER_MAX", []string{"1000", "1000000000"}, []string{"999", "1000000001"}},
		{"QUOTA_ANALYTICS_ROWS_PER_STATEMENT", []string{"1", "5000"}, []string{"0", "5001"}},
		{"QUOTA_ANALYTICS_FLUSH_DUTY", []string{"0.01", "1"}, []string{"0.009", "1.01", "NaN", "Inf"}},
		{"QUOTA_ANALYTICS_IFACE_USERS_EVERY", []string{"1s", "10m"}, []string{"999ms", "601s"}},
		{"QUOTA_ANALYTICS_HLL_DENSE_AT", []string{"0", "256", "16384"}, []string{"1", "255", "16385"}},
		{"QUOTA_HOT_THRESHOLD", []string{"1", "1e9"}, []string{"0", "-1", "1.1e9", "NaN"}},
		{"QUOTA_COLD_THRESHOLD", []string{"0", "60"}, []string{"-0.1", "NaN"}},
		{"QUOTA_MIGRATE_MIN_WINDOW", []string{"0s", "720h"}, []string{"-1ns"}},
		{"QUOTA_MIGRATE_LOG_MAX_ROWS", []string{"0"}, []string{"-1"}},
		{"QUOTA_MIGRATE_PART_WORKERS", []string{"1", "64"}, []string{"0", "65"}},
		{"QUOTA_MIGRATE_CELLS_PER_SEC", []string{"0", "1", "1e12"}, []string{"0.5", "-1", "+Inf", "NaN"}},
		{"QUOTA_COLD_HINTS", []string{"0", "1073741824"}, []string{"-1", "1073741825"}},
		{"QUOTA_RULES_POLL", []string{"100ms", "1m"}, []string{"99ms", "61s"}},
		{"QUOTA_DRAIN", []string{"0s", "5m"}, []string{"-1ns", "301s"}},
		{"QUOTA_AUTH_DENY_STATUS", []string{"402", "499"}, []string{"401", "500"}},
		{"QUOTA_FAIL_MODE", []string{"open", "closed"}, []string{"OPEN", "half"}},
		{"QUOTA_SCHEMA_ON_START", []string{"check", "apply", "off"}, []string{"Check", "skip"}},
		{"QUOTA_RULES_STORE", []string{"redis", "file"}, []string{"Redis", "etcd"}},
		{"QUOTA_NEW_TIER", []string{"hot"}, []string{"warm", "cold"}},
		{"QUOTA_HEADERS", []string{"legacy", "DRAFT", "Both"}, []string{"ietf"}},
		{"QUOTA_LOG_LEVEL", []string{"debug", "INFO", "Warn", "error"}, []string{"info+2", "warn-4", "trace"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, v := range tc.ok {
				if _, err := config.Load(envOf(map[string]string{tc.name: v})); err != nil {
					t.Errorf("%s=%s: %v", tc.name, v, err)
				}
			}
			for _, v := range tc.bad {
				_, err := config.Load(envOf(map[string]string{tc.name: v}))
				if err == nil || !strings.HasPrefix(err.Error(), tc.name+" ") || strings.Contains(err.Error(), "\n") {
					t.Errorf("%s=%s: error %v, want one line starting with the variable", tc.name, v, err)
					continue
				}
				if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(strings.TrimPrefix(v, "+"))) {
					t.Errorf("%s=%s: error %q does not show the value", tc.name, v, err)
				}
			}
		})
	}
}

// Validate applies the same bounds to settings made in code.
func TestValidate_BoundsOfSettingsMadeInCode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		edit func(*config.Settings)
		want string
	}{
		{"defaults", func(*config.Settings) {}, ""},
		{"pool size", func(s *config.Settings) { s.RedisPoolSize = 0 }, "QUOTA_REDIS_POOL_SIZE 0"},
		{"fail mode", func(s *config.Settings) { s.FailMode = "sometimes" }, `QUOTA_FAIL_MODE "sometimes"`},
		{"embedded gateway", func(s *config.Settings) { s.AuthDenyStatus = 200 }, "QUOTA_AUTH_DENY_STATUS 200"},
		{"cross-field", func(s *config.Settings) { s.ColdThreshold = 100 }, "QUOTA_COLD_THRESHOLD 100"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := config.Defaults()
			tc.edit(&s)
			err := s.Validate()
			if (err == nil) != (tc.want == "") || (err != nil && !strings.HasPrefix(err.Error(), tc.want)) {
				t.Fatalf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
}
