-- hot_idle.lua: which hot fixed-window cells hold nothing, after
-- directory.lua (package migrate moves those to cold without freezing
-- them: migrate/PROTOCOL.md, "Idle cells"). A cell is idle when neither its
-- counter of this window nor of the next exists, its directory field is
-- absent and its tag's cold filter does not hold it: it is hot, and its
-- count is 0. The answer is advice: the switch (cold_switch.lua with live
-- keys) checks the counters and the field again, atomically.
--
-- KEYS   tags' headers and counter keys, referred to by index
-- ARGV   4 values per cell: header key index, field, key index of this
--        window's counter, key index of the next window's counter
--
-- Reply: per cell 1 (idle) or 0.

-- How many cells of each tag this call may probe (cold_block).
local probes = {}
for i = 1, #ARGV, 4 do probes[ARGV[i]] = (probes[ARGV[i]] or 0) + 1 end

local out = {}
for i = 1, #ARGV, 4 do
  local idle = 0
  if redis.call('EXISTS', KEYS[tonumber(ARGV[i + 2])], KEYS[tonumber(ARGV[i + 3])]) == 0 then
    local h = dir_header(KEYS[tonumber(ARGV[i])])
    h.probes = h.probes or probes[ARGV[i]]
    local field = ARGV[i + 1]
    if not warm_get(h, field) and not cold_maybe(h, field) then idle = 1 end
  end
  out[#out + 1] = idle
end
return out
