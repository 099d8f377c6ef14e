-- 007: a finished day's per-user figures, sealed: once a UTC day is over,
-- Rollup merges each app's chunks of that day (every level, and the day's
-- sealed chunks if a late flush added to it) into one batch here, entries
-- summed per (user, interface), and deletes them from usage_user_chunks
-- (analytics/userseal.go). Before this, Rollup folded them into
-- usage_user_daily, one upserted row per (user, interface): ~11 µs of CPU
-- a row (BenchmarkFoldDay), for traffic whose every call is a new user
-- about as much as the check itself. usage_user_daily keeps the rows
-- folded before; queries read both tables.
--   part  bits << 8 | index, as in usage_user_chunks
--   seq   numbers a part's chunks (a part longer than 1 MiB of entries
--         before compression takes several)
CREATE TABLE IF NOT EXISTS usage_user_sealed (
  day DATE NOT NULL,
  app_id VARBINARY(256) NOT NULL,
  part SMALLINT UNSIGNED NOT NULL,
  seq INT UNSIGNED NOT NULL,
  entries INT UNSIGNED NOT NULL,
  body MEDIUMBLOB NOT NULL,
  PRIMARY KEY (day, app_id, part, seq)
) ENGINE=InnoDB;
