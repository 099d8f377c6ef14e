-- hot_freeze.lua: freeze hot fixed-window cells for a move out of the hot
-- tier and read their frozen counts (package migrate), after
-- directory.lua. For each cell, atomically: if the cell is hot (its
-- directory field is absent and its tag's cold filter does not hold it, or
-- a counter of this window or the next exists, which checks count in
-- whatever the filter says, or the caller has checked that the cold tier
-- has no row for it; or the field is 'H', hot in older versions), write
-- 'M' in its field and rename its live counter keys (this window's and the
-- next one's) to their frozen names (key .. '~'), keeping their TTLs.
-- From then on no check counts the cell: the hot script finds no key and
-- the 'M' marker, and answers "moving". A cell frozen before (field 'M')
-- is only read.
--
-- KEYS   tags' headers and counter keys, referred to by index
-- ARGV   5 values per cell: header key index, field, key index of this
--        window's counter, key index of the next window's counter, and
--        '1' when the cell is known to have no cold row ('0' otherwise)
--
-- Reply: 3 values per cell:
--   1, a count, its window ('0' this one, '1' the next; '' and '' when no
--      counter exists): frozen, now or before. The next window's count
--      wins (a check that counted there saw the latest window), frozen
--      keys before live ones
--   2, '', '': the field is absent, no counter exists and the cold filter
--      may hold the cell: nothing was done (the caller asks the cold tier,
--      then calls again with '1' for the cells without a row)
--   0, the field's value, '': the cell is not hot (warm, or frozen by
--      another kind of move); nothing was done

-- frozen_counts renames the live counter keys cur and nxt to their frozen
-- names (key .. '~') and returns their counts; a key that does not exist
-- answers its frozen key's count, if any ('' when neither exists). One
-- MGET reads all four.
local function frozen_counts(cur, nxt)
  local v = redis.call('MGET', cur, nxt, cur .. '~', nxt .. '~')
  if v[1] then redis.call('RENAME', cur, cur .. '~') end
  if v[2] then redis.call('RENAME', nxt, nxt .. '~') end
  return v[1] or v[3] or '', v[2] or v[4] or ''
end

-- first_count returns the first of keys that exists, with its window.
local function first_count(keys, windows)
  for j = 1, #keys do
    local n = redis.call('GET', keys[j])
    if n then return n, windows[j] end
  end
  return '', ''
end

local out = {}
local function reply(a, b, c)
  out[#out + 1] = a
  out[#out + 1] = b
  out[#out + 1] = c
end

-- How many cells of each tag this call may probe (cold_block).
local probes = {}
for i = 1, #ARGV, 5 do probes[ARGV[i]] = (probes[ARGV[i]] or 0) + 1 end

for i = 1, #ARGV, 5 do
  local h = dir_header_at(ARGV[i])
  h.probes = h.probes or probes[ARGV[i]]
  local field = ARGV[i + 1]
  local cur, nxt = KEYS[tonumber(ARGV[i + 2])], KEYS[tonumber(ARGV[i + 3])]
  local v = warm_get(h, field)
  if v == 'M' then
    reply(1, first_count({ nxt .. '~', cur .. '~', nxt, cur }, { '1', '0', '1', '0' }))
  elseif v == 'H' or (v == false and (ARGV[i + 4] == '1' or not cold_maybe(h, field)
      or redis.call('EXISTS', cur, nxt) > 0)) then
    warm_set(h, field, 'M')
    local c, n = frozen_counts(cur, nxt)
    if n ~= '' then
      reply(1, n, '1')
    elseif c ~= '' then
      reply(1, c, '0')
    else
      reply(1, '', '')
    end
  elseif v == false then
    reply(2, '', '')
  else
    reply(0, v, '')
  end
end
return out
