-- 004: per-cell activity, the scheduled migration's input (package migrate).
-- One row per fixed-window cell that was called, on the cell's cold shard
-- (tiers.JumpShard of its shard key).
--
--   k      CellID (tiers.CellIDOf)
--   ref    where the cell lives in every tier (migrate.EncodeRef: identity,
--          tag, shard key, window): the worker moves a cell from this alone
--   since  unix hour the history starts at
--   calls  checks of the cell since then (allowed or not)
--
-- The history is bounded: each cycle rescales rows older than the horizon
-- (7 days) to keep their mean calls per hour over the last 7 days, so a row
-- never grows and old bursts fade.
CREATE TABLE IF NOT EXISTS cell_activity (
  k BINARY(16) NOT NULL,
  ref VARBINARY(40) NOT NULL,
  since INT UNSIGNED NOT NULL,
  calls BIGINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (k)
) ENGINE=InnoDB;
