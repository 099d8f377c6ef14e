-- 005: usage_user_daily keyed day first. Its one query names (app_id,
-- user_id, day), which either key serves; but with app_id first a day's
-- upserts land all over the table's history, so once the table outgrows the
-- buffer pool every new row reads a page from disk (the uniform soak of
-- docs/reliability.md: mariadbd from 10 % to 70 % of a core in five minutes).
-- Day first, the pages a flush writes are those of the current day only.
-- (Rebuilds the table once: on a large table, run it in a quiet hour.)
ALTER TABLE usage_user_daily DROP PRIMARY KEY, ADD PRIMARY KEY (day, app_id, user_id, interface_id);
