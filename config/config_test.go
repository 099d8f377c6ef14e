package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/quota-platform/quota/config"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestLoad_DefaultsWorkLocally(t *testing.T) {
	t.Parallel()
	s, err := config.Load(envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if s.Listen != "127.0.0.1:8080" || s.FailMode != config.FailOpen || len(s.MySQLShards) != 2 || s.RedisAddrs[0] != "127.0.0.1:6379" ||
		!s.AnalyticsHoldMinute || s.SchemaOnStart != config.SchemaCheck {
		t.Fatalf("defaults %+v", s)
	}
}

func TestLoad_ReadsTheEnvironment(t *testing.T) {
	t.Parallel()
	s, err := config.Load(envOf(map[string]string{
		"QUOTA_LISTEN":                      "0.0.0.0:9000",
		"QUOTA_ADMIN_TOKEN":                 "a-long-enough-admin-token",
		"QUOTA_REDIS_ADDRS":                 "10.0.0.1:7000, 10.0.0.2:7000 ,",
		"QUOTA_FAIL_MODE":                   "closed",
		"QUOTA_REDIS_TIMEOUT":               "80ms",
		"QUOTA_MYSQL_SHARDS":                "u:p@tcp(db1:3306)/q0",
		"QUOTA_ANALYTICS_HOLD_MINUTE":       "off",
		"QUOTA_ANALYTICS_HLL_DENSE_AT":      "0",
		"QUOTA_ANALYTICS_IFACE_USERS_EVERY": "2m",
		"QUOTA_SCHEMA_ON_START":             "apply",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.RedisAddrs) != 2 || s.RedisAddrs[1] != "10.0.0.2:7000" || s.FailMode != config.FailClosed ||
		s.RedisTimeout != 80*time.Millisecond || len(s.MySQLShards) != 1 || s.AnalyticsHoldMinute ||
		s.AnalyticsHLLDenseAt != 0 || s.AnalyticsIfaceUsersEvery != 2*time.Minute || s.SchemaOnStart != config.SchemaApply {
		t.Fatalf("%+v", s)
	}
}

func TestLoad_RedisOptionsRulesStoreAndDrain(t *testing.T) {
	t.Parallel()
	s, err := config.Load(envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if s.RulesStore != "redis" || s.RulesPoll != time.Second || s.Drain != 5*time.Second || s.RedisCluster || s.RedisTLSConfig != nil {
		t.Fatalf("defaults: store %q poll %s drain %s cluster %v tls %v", s.RulesStore, s.RulesPoll, s.Drain, s.RedisCluster, s.RedisTLSConfig)
	}
	cases := []struct {
		name  string
		env   map[string]string
		check func(config.Settings) bool
	}{
		{"several addresses mean a cluster", map[string]string{"QUOTA_REDIS_ADDRS": "10.0.0.1:7000,10.0.0.2:7000"}, func(s config.Settings) bool { return s.RedisCluster }},
		{"one configuration endpoint", map[string]string{"QUOTA_REDIS_CLUSTER": "on"}, func(s config.Settings) bool { return s.RedisCluster }},
		{"sentinels are not a cluster", map[string]string{"QUOTA_REDIS_ADDRS": "10.0.0.1:26379,10.0.0.2:26379", "QUOTA_REDIS_SENTINEL_MASTER": "main"},
			func(s config.Settings) bool { return !s.RedisCluster && s.RedisSentinelMaster == "main" }},
		{"TLS with the system's CAs", map[string]string{"QUOTA_REDIS_TLS": "on", "QUOTA_REDIS_TLS_SERVER_NAME": "redis.internal"},
			func(s config.Settings) bool {
				return s.RedisTLSConfig != nil && s.RedisTLSConfig.ServerName == "redis.internal" && s.RedisTLSConfig.RootCAs == nil
			}},
		{"file rules store, drain off", map[string]string{"QUOTA_RULES_STORE": "file", "QUOTA_DRAIN": "0s", "QUOTA_RULES_POLL": "250ms"},
			func(s config.Settings) bool {
				return s.RulesStore == "file" && s.Drain == 0 && s.RulesPoll == 250*time.Millisecond
			}},
		{"rules state outside the tree", map[string]string{"QUOTA_RULES_STATE": "/var/lib/quotad/rules-state.yaml"},
			func(s config.Settings) bool { return s.RulesState == "/var/lib/quotad/rules-state.yaml" }},
	}
	for _, tc := range cases {
		s, err := config.Load(envOf(tc.env))
		if err != nil || !tc.check(s) {
			t.Errorf("%s: %v %+v", tc.name, err, s)
		}
	}
}

func TestLoad_InvalidSettingsGiveOneClearLine(t *testing.T) {
	t.Parallel()
	cases := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"QUOTA_FAIL_MODE": "sometimes"}, "QUOTA_FAIL_MODE"},
		{map[string]string{"QUOTA_LISTEN": "8080"}, "QUOTA_LISTEN"},
		{map[string]string{"QUOTA_LISTEN": "0.0.0.0:8080"}, "QUOTA_ADMIN_TOKEN"},
		{map[string]string{"QUOTA_ADMIN_TOKEN": "short"}, "QUOTA_ADMIN_TOKEN"},
		{map[string]string{"QUOTA_REDIS_ADDRS": "nohost"}, "QUOTA_REDIS_ADDRS"},
		{map[string]string{"QUOTA_REDIS_KEY_PREFIX": "a{b}"}, "QUOTA_REDIS_KEY_PREFIX"},
		{map[string]string{"QUOTA_REDIS_TIMEOUT": "soon"}, "QUOTA_REDIS_TIMEOUT"},
		{map[string]string{"QUOTA_REDIS_TIMEOUT": "0s"}, "QUOTA_REDIS_TIMEOUT"},
		{map[string]string{"QUOTA_REDIS_POOL_SIZE": "many"}, "QUOTA_REDIS_POOL_SIZE"},
		{map[string]string{"QUOTA_MAX_IN_FLIGHT": "0"}, "QUOTA_MAX_IN_FLIGHT"},
		{map[string]string{"QUOTA_TTL_JITTER": "2h"}, "QUOTA_TTL_JITTER"},
		{map[string]string{"QUOTA_ANALYTICS": "maybe"}, "QUOTA_ANALYTICS"},
		{map[string]string{"QUOTA_SCHEMA_ON_START": "migrate"}, "QUOTA_SCHEMA_ON_START"},
		{map[string]string{"QUOTA_ANALYTICS_HOLD_MINUTE": "yes"}, "QUOTA_ANALYTICS_HOLD_MINUTE"},
		{map[string]string{"QUOTA_ANALYTICS_BUFFER_MAX": "999"}, "QUOTA_ANALYTICS_BUFFER_MAX"},
		{map[string]string{"QUOTA_ANALYTICS_BUFFER_MAX": "3000000000"}, "QUOTA_ANALYTICS_BUFFER_MAX"},
		{map[string]string{"QUOTA_ANALYTICS_FLUSH_DUTY": "0"}, "QUOTA_ANALYTICS_FLUSH_DUTY"},
		{map[string]string{"QUOTA_ANALYTICS_FLUSH_DUTY": "1.5"}, "QUOTA_ANALYTICS_FLUSH_DUTY"},
		{map[string]string{"QUOTA_ANALYTICS_FLUSH_DUTY": "NaN"}, "QUOTA_ANALYTICS_FLUSH_DUTY"},
		{map[string]string{"QUOTA_ANALYTICS_FLUSH_DUTY": "half"}, "QUOTA_ANALYTICS_FLUSH_DUTY"},
		{map[string]string{"QUOTA_ANALYTICS_HLL_DENSE_AT": "100"}, "QUOTA_ANALYTICS_HLL_DENSE_AT"},
		{map[string]string{"QUOTA_ANALYTICS_HLL_DENSE_AT": "20000"}, "QUOTA_ANALYTICS_HLL_DENSE_AT"},
		{map[string]string{"QUOTA_ANALYTICS_HLL_DENSE_AT": "-1"}, "QUOTA_ANALYTICS_HLL_DENSE_AT"},
		{map[string]string{"QUOTA_ANALYTICS_IFACE_USERS_EVERY": "500ms"}, "QUOTA_ANALYTICS_IFACE_USERS_EVERY"},
		{map[string]string{"QUOTA_ANALYTICS_IFACE_USERS_EVERY": "1h"}, "QUOTA_ANALYTICS_IFACE_USERS_EVERY"},
		{map[string]string{"QUOTA_ANALYTICS_IFACE_USERS_EVERY": "soon"}, "QUOTA_ANALYTICS_IFACE_USERS_EVERY"},
		{map[string]string{"QUOTA_PPROF_LISTEN": "0.0.0.0:6060"}, "QUOTA_PPROF_LISTEN"},
		{map[string]string{"QUOTA_GC_HEAP_FLOOR_MB": "-1"}, "QUOTA_GC_HEAP_FLOOR_MB"},
		{map[string]string{"QUOTA_GC_HEAP_FLOOR_MB": "128MB"}, "QUOTA_GC_HEAP_FLOOR_MB"},
		{map[string]string{"QUOTA_REDIS_DB": "16"}, "QUOTA_REDIS_DB"},
		{map[string]string{"QUOTA_REDIS_DB": "2", "QUOTA_REDIS_ADDRS": "10.0.0.1:7000,10.0.0.2:7000"}, "QUOTA_REDIS_DB"},
		{map[string]string{"QUOTA_PPROF_LISTEN": "6060"}, "QUOTA_PPROF_LISTEN"},
		{map[string]string{"QUOTA_REDIS_DB": "2", "QUOTA_REDIS_CLUSTER": "on"}, "QUOTA_REDIS_DB"},
		{map[string]string{"QUOTA_REDIS_CLUSTER": "maybe"}, "QUOTA_REDIS_CLUSTER"},
		{map[string]string{"QUOTA_REDIS_CLUSTER": "off", "QUOTA_REDIS_ADDRS": "10.0.0.1:7000,10.0.0.2:7000"}, "QUOTA_REDIS_CLUSTER"},
		{map[string]string{"QUOTA_REDIS_SENTINEL_MASTER": "m", "QUOTA_REDIS_CLUSTER": "on"}, "QUOTA_REDIS_SENTINEL_MASTER"},
		{map[string]string{"QUOTA_REDIS_SENTINEL_PASSWORD": "p"}, "QUOTA_REDIS_SENTINEL_MASTER"},
		{map[string]string{"QUOTA_REDIS_USERNAME": "u"}, "QUOTA_REDIS_PASSWORD"},
		{map[string]string{"QUOTA_REDIS_PASSWORD": "p", "QUOTA_REDIS_PASSWORD_FILE": "/etc/x"}, "QUOTA_REDIS_PASSWORD_FILE"},
		{map[string]string{"QUOTA_REDIS_PASSWORD_FILE": "/nonexistent/redis.pass"}, "QUOTA_REDIS_PASSWORD_FILE"},
		{map[string]string{"QUOTA_REDIS_TLS": "yes"}, "QUOTA_REDIS_TLS"},
		{map[string]string{"QUOTA_REDIS_TLS_CA": "/etc/ca.crt"}, "QUOTA_REDIS_TLS is not on"},
		{map[string]string{"QUOTA_REDIS_TLS": "on", "QUOTA_REDIS_TLS_KEY": "/etc/k"}, "QUOTA_REDIS_TLS_CERT"},
		{map[string]string{"QUOTA_REDIS_TLS": "on", "QUOTA_REDIS_TLS_CA": "/nonexistent/ca.crt"}, "QUOTA_REDIS_TLS_CA"},
		{map[string]string{"QUOTA_RULES_STORE": "etcd"}, "QUOTA_RULES_STORE"},
		{map[string]string{"QUOTA_RULES_POLL": "10ms"}, "QUOTA_RULES_POLL"},
		{map[string]string{"QUOTA_RULES_STATE": "state/rules.yaml"}, "QUOTA_RULES_STATE"},
		{map[string]string{"QUOTA_DRAIN": "-1s"}, "QUOTA_DRAIN"},
		{map[string]string{"QUOTA_DRAIN": "later"}, "QUOTA_DRAIN"},
		{map[string]string{"QUOTA_DRAIN": "1h"}, "QUOTA_DRAIN"},
		{map[string]string{"QUOTA_TIMEZONE": "Mars/Olympus_Mons"}, "QUOTA_TIMEZONE"},
		{map[string]string{"QUOTA_TIMEZONE": "Local"}, "QUOTA_TIMEZONE"},
		{map[string]string{"QUOTA_TIMEZONE": "+08:00"}, "QUOTA_TIMEZONE"},
		{map[string]string{"QUOTA_WEBHOOK_URL": "ftp://x/hook", "QUOTA_WEBHOOK_SECRET": "0123456789abcdef"}, "QUOTA_WEBHOOK_URL"},
		{map[string]string{"QUOTA_WEBHOOK_URL": "https://x/hook"}, "QUOTA_WEBHOOK_SECRET"},
		{map[string]string{"QUOTA_WEBHOOK_SECRET": "0123456789abcdef"}, "QUOTA_WEBHOOK_URL"},
	}
	for _, tc := range cases {
		_, err := config.Load(envOf(tc.env))
		if err == nil {
			t.Errorf("%v accepted", tc.env)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: error %q should be one line naming %s", tc.env, err, tc.want)
		}
	}
}

func TestLoad_TimeZoneIsLoaded(t *testing.T) {
	t.Parallel()
	s, err := config.Load(envOf(map[string]string{"QUOTA_TIMEZONE": "Asia/Shanghai"}))
	if err != nil {
		t.Fatal(err)
	}
	if s.Location.String() != "Asia/Shanghai" {
		t.Fatalf("location %v", s.Location)
	}
	d, err := config.Load(envOf(nil))
	if err != nil || d.Location != time.UTC {
		t.Fatalf("default location %v, %v; want UTC", d.Location, err)
	}
}
