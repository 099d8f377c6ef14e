-- hot_freeze.lua: freeze hot fixed-window cells for a move out of the hot
-- tier (package migrate). For each cell, atomically: if its directory field
-- is 'H' (or absent: a cell the mover found hot without a marker), write 'M' there and rename the cell's live
-- counter keys (this window's and the next one's) to their frozen names
-- (key .. '~'), keeping their TTLs. From then on no check counts the cell:
-- the hot script finds no key and the 'M' marker, and answers "moving".
--
-- KEYS   warm bucket hashes and counter keys, referred to by index
-- ARGV   4 values per cell: bucket key index, field, key index of this
--        window's counter, key index of the next window's counter
--
-- Reply: per cell 1 (frozen now or already frozen: the field holds 'M'),
-- or 0 (the field holds something else: the cell is not hot).
local out = {}
for i = 1, #ARGV, 4 do
  local bucket = KEYS[tonumber(ARGV[i])]
  local field = ARGV[i + 1]
  local v = redis.call('HGET', bucket, field)
  if v == false or v == 'H' then
    redis.call('HSET', bucket, field, 'M')
    for _, ki in ipairs({ ARGV[i + 2], ARGV[i + 3] }) do
      local k = KEYS[tonumber(ki)]
      if redis.call('EXISTS', k) == 1 then redis.call('RENAME', k, k .. '~') end
    end
    out[#out + 1] = 1
  elseif v == 'M' then
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
