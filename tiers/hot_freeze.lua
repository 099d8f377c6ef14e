-- hot_freeze.lua: freeze hot fixed-window cells for a move out of the hot
-- tier (package migrate), after directory.lua. For each cell, atomically:
-- if its directory field is absent (hot) or 'H' (hot, older versions),
-- write 'M' there and rename the cell's live counter keys (this window's
-- and the next one's) to their frozen names (key .. '~'), keeping their
-- TTLs. From then on no check counts the cell: the hot script finds no key
-- and the 'M' marker, and answers "moving".
--
-- KEYS   tags' headers and counter keys, referred to by index
-- ARGV   4 values per cell: header key index, field, key index of this
--        window's counter, key index of the next window's counter
--
-- Reply: per cell 1 (frozen now or already frozen: the field holds 'M'),
-- or 0 (the field holds something else: the cell is not hot).
local out = {}
for i = 1, #ARGV, 4 do
  local h = dir_header(KEYS[tonumber(ARGV[i])])
  local field = ARGV[i + 1]
  local v = warm_get(h, field)
  if v == false or v == 'H' then
    warm_set(h, field, 'M')
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
