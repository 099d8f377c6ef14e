-- warm_cas.lua: compare-and-set warm-tier records, all or nothing, after
-- directory.lua (which locates each field in its tag's buckets). Go reads
-- the records (warm_read.lua), decides and encodes (the record codec is Go);
-- this script then writes the new values only if no record changed in
-- between.
--
-- KEYS[1..k]  tags' headers (all in one hash slot)
-- ARGV        4 values per record:
--               header index into KEYS (1-based), field,
--               expected value ("" = the field must be absent),
--               new value ("" = delete the field)
--
-- Reply: 1 when every field held its expected value and every new value was
-- written; 0 when any field differed, and then nothing was written.

local n = #ARGV
for i = 1, n, 4 do
  local cur = warm_get(dir_header_at(ARGV[i]), ARGV[i + 1]) or ''
  if cur ~= ARGV[i + 2] then return 0 end
end
for i = 1, n, 4 do
  local new = ARGV[i + 3]
  if new ~= ARGV[i + 2] then
    local h = dir_header_at(ARGV[i])
    if new == '' then
      warm_del(h, ARGV[i + 1])
    else
      warm_set(h, ARGV[i + 1], new)
    end
  end
end
return 1
