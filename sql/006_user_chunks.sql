-- 006: per-user figures as flushes write them: a few compressed chunks per
-- (day, app) and flush instead of one upsert per (user, interface), which
-- cost MariaDB ~7 µs of CPU a row on the check path's cores. Rollup merges
-- the day's flush chunks (level 0) into fewer, larger ones (level 1) as the
-- day goes on, so a user's query reads few, and folds a day's chunks into
-- usage_user_daily once the day is over (analytics/userchunk.go has the
-- body's format).
--   part      bits << 8 | index: the chunk holds the users whose FNV-1a
--             hash has index in its low bits (bits 0: all of them)
--   batch_id  the flush's analytics_batches id, or a merge's own; seq
--             numbers a part's chunks within it
CREATE TABLE IF NOT EXISTS usage_user_chunks (
  day DATE NOT NULL,
  app_id VARBINARY(256) NOT NULL,
  part SMALLINT UNSIGNED NOT NULL,
  batch_id BINARY(16) NOT NULL,
  seq INT UNSIGNED NOT NULL,
  level TINYINT UNSIGNED NOT NULL,
  entries INT UNSIGNED NOT NULL,
  body MEDIUMBLOB NOT NULL,
  PRIMARY KEY (day, app_id, part, batch_id, seq),
  KEY by_level (day, level, app_id)
) ENGINE=InnoDB;
