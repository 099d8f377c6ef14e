-- 001: cold-tier counters. One row per fixed-window counter (identity key = MD5 of the identity, window index).
CREATE TABLE IF NOT EXISTS cold_counters (
  k BINARY(16) NOT NULL,
  win INT UNSIGNED NOT NULL,
  cnt INT UNSIGNED NOT NULL,
  PRIMARY KEY (k, win)
) ENGINE=InnoDB;
