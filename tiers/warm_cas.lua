-- warm_cas.lua: compare-and-set warm-tier records, all or nothing. Go reads
-- the records (HMGET), decides and encodes (Lua has no snappy); this script
-- then writes the new values only if no record changed in between.
--
-- KEYS[1..k]  warm bucket hashes (all in one hash slot: one tag)
-- ARGV        4 values per record:
--               key index into KEYS (1-based), field,
--               expected value ("" = the field must be absent),
--               new value ("" = delete the field)
--
-- Reply: 1 when every field held its expected value and every new value was
-- written; 0 when any field differed, and then nothing was written.

local n = #ARGV
for i = 1, n, 4 do
  local cur = redis.call('HGET', KEYS[tonumber(ARGV[i])], ARGV[i + 1])
  if cur == false then cur = '' end
  if cur ~= ARGV[i + 2] then return 0 end
end
for i = 1, n, 4 do
  local new = ARGV[i + 3]
  if new ~= ARGV[i + 2] then
    local key = KEYS[tonumber(ARGV[i])]
    if new == '' then
      redis.call('HDEL', key, ARGV[i + 1])
    else
      redis.call('HSET', key, ARGV[i + 1], new)
    end
  end
end
return 1
