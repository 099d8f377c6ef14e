-- 008: the calls of fixed-window cells as instances flush them, in batches
-- (package migrate, activity.go). Before this, every flush upserted one
-- cell_activity row per cell it had seen: with windows of a day and calls
-- spread over many cells, about one row write per check. Now a flush
-- writes a few rows per shard, and each cycle folds a part's batches into
-- cell_activity just before it scans that part.
--   part   the cycle's part of the shard the cells are in (cycle.go
--          partRange: the first byte of the cell id * 16 / 256)
--   hour   unix hour of the flush (a new cell's history starts there)
--   cells  entries in cell id order, each uvarint(len(ref)) ref
--          uvarint(calls) (ref as cell_activity.ref)
CREATE TABLE IF NOT EXISTS cell_activity_log (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  part TINYINT UNSIGNED NOT NULL,
  hour INT UNSIGNED NOT NULL,
  cells MEDIUMBLOB NOT NULL,
  PRIMARY KEY (id),
  KEY by_part (part, id)
) ENGINE=InnoDB;
