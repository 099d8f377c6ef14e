-- 003: cold tier, one row per fixed-window cell (tiers/cold.go). A cell is
-- (identity, window length) without the window index; its record says
-- which window its count is for, so a rarely called cell keeps one row
-- however many windows pass. This replaces 001's cold_counters (one row per
-- window), which nothing ever wrote; that table is left in place.
--
--   k  CellID: MD5 of the identity and the window length (tiers.CellIDOf)
--   r  the record, raw form of tiers/warmrecord.go: last call (4 bytes),
--      count and mean call interval (varints), age and samples (1 byte):
--      7-8 bytes; empty while a first call reserves the row
--
-- ~44 bytes a row in InnoDB (16 + 1+r + 5 header + 13 transaction fields);
-- measured (make bench-memory, 1M rows): 77 bytes a row after random-order
-- inserts, 54 after OPTIMIZE TABLE. The target is at most 80 including
-- indexes, so there is no secondary index.
CREATE TABLE IF NOT EXISTS cold_cells (
  k BINARY(16) NOT NULL,
  r VARBINARY(40) NOT NULL,
  PRIMARY KEY (k)
) ENGINE=InnoDB;
