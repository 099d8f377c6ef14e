-- 002: usage analytics (package analytics). Rows live on the shard chosen by
-- analytics.ShardIndex(app_id). Identifiers are VARBINARY: compared byte for
-- byte, up to the 256 bytes a dimension value may have.

-- Call curve points. res is the point's width in seconds (60, 300, 3600,
-- 604800); t the Unix time of its start (weeks start on Monday 00:00 UTC).
-- The rollup job moves points from res 60 to 300 to 3600 to 604800 as they
-- age, adding and deleting in one transaction.
CREATE TABLE IF NOT EXISTS usage_series (
  app_id VARBINARY(256) NOT NULL,
  res INT UNSIGNED NOT NULL,
  t BIGINT NOT NULL,
  interface_id VARBINARY(256) NOT NULL,
  calls BIGINT UNSIGNED NOT NULL DEFAULT 0,
  allowed BIGINT UNSIGNED NOT NULL DEFAULT 0,
  denied BIGINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (app_id, res, t, interface_id),
  KEY by_time (res, t)
) ENGINE=InnoDB;

-- Per app, interface and UTC day (the app's figures are the sum over its
-- interfaces).
CREATE TABLE IF NOT EXISTS usage_daily (
  app_id VARBINARY(256) NOT NULL,
  day DATE NOT NULL,
  interface_id VARBINARY(256) NOT NULL,
  calls BIGINT UNSIGNED NOT NULL DEFAULT 0,
  allowed BIGINT UNSIGNED NOT NULL DEFAULT 0,
  denied BIGINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (app_id, day, interface_id),
  KEY by_day (day)
) ENGINE=InnoDB;

-- Per app, user, UTC day and interface.
CREATE TABLE IF NOT EXISTS usage_user_daily (
  app_id VARBINARY(256) NOT NULL,
  user_id VARBINARY(256) NOT NULL,
  day DATE NOT NULL,
  interface_id VARBINARY(256) NOT NULL,
  calls BIGINT UNSIGNED NOT NULL DEFAULT 0,
  allowed BIGINT UNSIGNED NOT NULL DEFAULT 0,
  denied BIGINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (app_id, user_id, day, interface_id)
) ENGINE=InnoDB;

-- The registers of the daily distinct-user HyperLogLogs (the Redis string
-- value, as GET returns it), saved before the Redis key expires. scope 0 is
-- the whole app (interface_id ''), scope 1 one interface.
CREATE TABLE IF NOT EXISTS usage_uniques (
  app_id VARBINARY(256) NOT NULL,
  day DATE NOT NULL,
  scope TINYINT UNSIGNED NOT NULL,
  interface_id VARBINARY(256) NOT NULL,
  unique_users BIGINT UNSIGNED NOT NULL DEFAULT 0,
  registers MEDIUMBLOB NOT NULL,
  updated_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (app_id, day, scope, interface_id)
) ENGINE=InnoDB;

-- One row per committed flush transaction: a flush whose COMMIT answer was
-- lost looks its id up before retrying, so it is never applied twice.
CREATE TABLE IF NOT EXISTS analytics_batches (
  batch_id BINARY(16) NOT NULL PRIMARY KEY,
  created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
  KEY by_created (created_at)
) ENGINE=InnoDB;

-- App keys for the stats API: only the SHA-256 of the key is stored.
CREATE TABLE IF NOT EXISTS app_keys (
  app_id VARBINARY(256) NOT NULL PRIMARY KEY,
  key_hash BINARY(32) NOT NULL,
  created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
  UNIQUE KEY by_hash (key_hash)
) ENGINE=InnoDB;
