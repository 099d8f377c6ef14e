package config

import (
	"strings"
	"testing"
	"time"
)

func TestMigrationSettings(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	s, err := Load(env(nil))
	if err != nil || s.MigrateSchedule != "@daily" || !s.Tiering || s.NewTier != "hot" || s.ColdHints != 1<<20 || s.MigrateMinWindow != 2*time.Hour || s.MigrateLogMaxRows != 1000 || s.MigratePartWorkers != 4 || s.MigrateCellsPerSec != 0 {
		t.Fatalf("defaults: %+v %v", s, err)
	}
	s, err = Load(env(map[string]string{"QUOTA_MIGRATE_SCHEDULE": "0 3 * * *", "QUOTA_HOT_THRESHOLD": "120.5", "QUOTA_COLD_THRESHOLD": "0.5", "QUOTA_PROMOTE_INTERVAL": "20s", "QUOTA_DEMOTE_INTERVAL": "2h", "QUOTA_TIERING": "off", "QUOTA_COLD_HINTS": "0", "QUOTA_MIGRATE_MIN_WINDOW": "0s", "QUOTA_MIGRATE_LOG_MAX_ROWS": "0", "QUOTA_MIGRATE_PART_WORKERS": "3", "QUOTA_MIGRATE_CELLS_PER_SEC": "20000"}))
	if err != nil || s.ColdHints != 0 || s.HotThreshold != 120.5 || s.ColdThreshold != 0.5 || s.PromoteInterval.Seconds() != 20 || s.DemoteInterval.Hours() != 2 || s.Tiering || s.MigrateMinWindow != 0 || s.MigrateLogMaxRows != 0 || s.MigratePartWorkers != 3 || s.MigrateCellsPerSec != 20000 {
		t.Fatalf("set: %+v %v", s, err)
	}
	for _, c := range []struct{ k, v, want string }{
		{"QUOTA_MIGRATE_SCHEDULE", "daily", "QUOTA_MIGRATE_SCHEDULE"},
		{"QUOTA_HOT_THRESHOLD", "x", "QUOTA_HOT_THRESHOLD"},
		{"QUOTA_HOT_THRESHOLD", "0", "QUOTA_HOT_THRESHOLD"},
		{"QUOTA_COLD_THRESHOLD", "100", "QUOTA_COLD_THRESHOLD"},
		{"QUOTA_COLD_THRESHOLD", "-1", "QUOTA_COLD_THRESHOLD"},
		{"QUOTA_PROMOTE_INTERVAL", "2h", "QUOTA_PROMOTE_INTERVAL"},
		{"QUOTA_DEMOTE_INTERVAL", "-1s", "QUOTA_PROMOTE_INTERVAL"},
		{"QUOTA_NEW_TIER", "lukewarm", "QUOTA_NEW_TIER"},
		{"QUOTA_NEW_TIER", "cold", "QUOTA_NEW_TIER"},
		{"QUOTA_TIERING", "maybe", "QUOTA_TIERING"},
		{"QUOTA_MIGRATE_MIN_WINDOW", "-1h", "QUOTA_MIGRATE_MIN_WINDOW"},
		{"QUOTA_MIGRATE_LOG_MAX_ROWS", "-5", "QUOTA_MIGRATE_LOG_MAX_ROWS"},
		{"QUOTA_MIGRATE_LOG_MAX_ROWS", "many", "QUOTA_MIGRATE_LOG_MAX_ROWS"},
		{"QUOTA_MIGRATE_PART_WORKERS", "0", "QUOTA_MIGRATE_PART_WORKERS"},
		{"QUOTA_MIGRATE_PART_WORKERS", "65", "QUOTA_MIGRATE_PART_WORKERS"},
		{"QUOTA_MIGRATE_PART_WORKERS", "two", "QUOTA_MIGRATE_PART_WORKERS"},
		{"QUOTA_MIGRATE_CELLS_PER_SEC", "-1", "QUOTA_MIGRATE_CELLS_PER_SEC"},
		{"QUOTA_MIGRATE_CELLS_PER_SEC", "fast", "QUOTA_MIGRATE_CELLS_PER_SEC"},
		{"QUOTA_MIGRATE_CELLS_PER_SEC", "Inf", "QUOTA_MIGRATE_CELLS_PER_SEC"},
		{"QUOTA_MIGRATE_CELLS_PER_SEC", "NaN", "QUOTA_MIGRATE_CELLS_PER_SEC"},
		{"QUOTA_MIGRATE_CELLS_PER_SEC", "0.001", "QUOTA_MIGRATE_CELLS_PER_SEC"},
		{"QUOTA_WARM_BUCKETS_PER_TAG", "1024", "QUOTA_WARM_BUCKETS_PER_TAG"},
		{"QUOTA_COLD_HINTS", "-1", "QUOTA_COLD_HINTS"},
		{"QUOTA_COLD_HINTS", "lots", "QUOTA_COLD_HINTS"},
		{"QUOTA_COLD_HINTS", "2000000000", "QUOTA_COLD_HINTS"},
	} {
		_, err := Load(env(map[string]string{c.k: c.v}))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s=%s: error %v, want one line starting %s", c.k, c.v, err, c.want)
		}
	}
}
