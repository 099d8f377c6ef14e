-- 006: per-user figures as flushes write them: a few compressed chunks per
-- (day, app) and flush instead of one upsert per (user, interface), which
-- cost MariaDB ~7 µs of CPU a row on the check path's cores. Rollup merges
-- today's chunks in size tiers as the day goes on: 32 flush batches (level
-- 0) into one batch of level 1, 8 batches of a level L >= 1 into one of
-- L+1 (level 4 into level 4), so a user's query reads few, and, once the
-- day is over, seals them into usage_user_sealed (sql/007_user_sealed.sql;
-- until then it folded them into usage_user_daily; analytics/userfold.go,
-- userseal.go; analytics/userchunk.go has the body's format).
-- (Comments edited after release; the statement is as released.)
--   part      bits << 8 | index: the chunk holds the users whose FNV-1a
--             hash has index in its low bits (bits 0: all of them)
--   batch_id  the flush's analytics_batches id, or a merge's own; seq
--             numbers a part's chunks within it
--   level     0: a flush's chunks; L >= 1: a merge's. The merge triggers
--             count distinct batch_id per (day, level, app_id) from
--             by_level alone (an InnoDB key holds the primary key's columns)
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
