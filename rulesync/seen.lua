-- seen.lua: the content versions the store has had in force, kept as the
-- fields "seen:<version>" (value: when first in force, Unix ms) of the rules
-- hash itself, so that every script touches one key (one Cluster slot).
-- Loaded in front of put.lua, seed.lua and offer.lua.
--
-- remember(key, version, at) marks version as seen. The hash holds at most
-- hash_cap fields: past that, the versions known longest are forgotten
-- down to seen_keep (so the pruning, an HGETALL, runs once per ~100 writes).
local hash_cap, seen_keep = 1000, 900

local function remember(key, version, at)
  redis.call('HSETNX', key, 'seen:' .. version, at)
  if redis.call('HLEN', key) <= hash_cap then return end
  local all = redis.call('HGETALL', key)
  local seen = {}
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 5) == 'seen:' then
      seen[#seen + 1] = {all[i], tonumber(all[i + 1]) or 0}
    end
  end
  if #seen <= seen_keep then return end
  table.sort(seen, function(a, b) return a[2] < b[2] end)
  for i = 1, #seen - seen_keep do
    redis.call('HDEL', key, seen[i][1])
  end
end
