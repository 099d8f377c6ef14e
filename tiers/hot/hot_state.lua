-- hot_state.lua: where hot fixed-window cells stand, after directory.lua,
-- for the scheduled cycle and moves to cold (package migrate): a cell's
-- directory field, and for a cell without one its counters of this window
-- and the next and whether its tag's cold filter may hold it. A cell with
-- no field, no filter bit and no counter is idle: hot, at 0; one with a
-- counter of this window only holds that count. Both go cold without a
-- freeze (migrate/PROTOCOL.md, "Quiet cells"). Advice only: the moves
-- check again, atomically. An idle cell bound for cold is held: given a
-- TTL, the script writes its counter of this window as 0, so that checks
-- count in hot, not in the cold row the move writes before its switch,
-- until that switch deletes the 0 ("Quiet cells").
--
-- KEYS     the tags' headers, then the counters of this window and the
--          next of each cell, in cell order
-- ARGV[1]  K, the number of headers
-- ARGV[1+k], k = 1..K  the number of cells of header k: the cells come
--          in header order, header 1's first
-- then 2 values per cell: its field, and the TTL in milliseconds of the 0
--          counter to write if it is idle ('': none)
--
-- Reply: per cell its field's value, or, with no field, 0 (idle; held if
-- a TTL was given), 1 (no counter; the cold filter may hold it), 2 (hot
-- with a counter of the next window, or with a counter and a filter that
-- may hold it) or a one-value array: the value of its counter of this
-- window (hot, no counter of the next, no filter bit).

local K = tonumber(ARGV[1])
local counters = dir_mget(K + 1) -- of all cells, in order
local out = {}
local i = K + 2 -- the cell's first ARGV
local c = 0 -- the index in counters before the cell's
for k = 1, K do
  local h, n = dir_header(KEYS[k]), tonumber(ARGV[1 + k])
  h.probes = n -- cold_block
  for _ = 1, n do
    local field = ARGV[i]
    local v = warm_get(h, field)
    c = c + 2
    if v then
      out[#out + 1] = v
    elseif counters[c] then
      out[#out + 1] = 2
    elseif cold_maybe(h, field) then
      out[#out + 1] = counters[c - 1] and 2 or 1
    elseif counters[c - 1] then
      out[#out + 1] = {counters[c - 1]}
    else
      if ARGV[i + 1] ~= '' then redis.call('SET', KEYS[K + c - 1], '0', 'PX', ARGV[i + 1]) end
      out[#out + 1] = 0
    end
    i = i + 2
  end
end
return out
