-- 009: who is throttled (package analytics, throttled.go). Per app, day
-- (the analytics day) and rule, the identities the rule denied: the rule's
-- dimension values as a JSON object, and their denials, added by every
-- instance's flush (upper bounds; denied - max_overcount is a lower bound,
-- and the two are equal for an identity counted exactly). Rows live on the
-- shard chosen by analytics.ShardIndex(app_id); each (app, day, rule) is
-- pruned to its most denied rows (ThrottledOptions.KeepRows), and days older
-- than ThrottledOptions.KeepDays are deleted.
CREATE TABLE IF NOT EXISTS throttled_identities (
  app_id VARBINARY(256) NOT NULL,
  day DATE NOT NULL,
  rule VARBINARY(512) NOT NULL,
  identity_hash BINARY(16) NOT NULL,
  dimensions BLOB NOT NULL,
  denied BIGINT UNSIGNED NOT NULL DEFAULT 0,
  max_overcount BIGINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (app_id, day, rule, identity_hash),
  KEY by_denied (app_id, day, rule, denied),
  KEY by_day (day)
) ENGINE=InnoDB;
