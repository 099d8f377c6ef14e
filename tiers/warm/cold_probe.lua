-- cold_probe.lua: ask the cold filters about cells, after directory.lua
-- (for the mover, tools and tests; the hot script probes on its own).
--
-- KEYS     tags' headers (all in one hash slot)
-- ARGV     pairs: header index into KEYS (1-based), the cell's warm field
--
-- Reply: per pair 1 when the tag's cold filter may hold the cell (a false
-- positive included), 0 when it does not.
local probes = {} -- per tag, its cells in this call (cold_block)
for i = 1, #ARGV, 2 do probes[ARGV[i]] = (probes[ARGV[i]] or 0) + 1 end
local out = {}
for i = 1, #ARGV, 2 do
  local h = dir_header_at(ARGV[i])
  h.probes = h.probes or probes[ARGV[i]]
  local m = cold_maybe(h, ARGV[i + 1])
  if m then out[#out + 1] = 1 else out[#out + 1] = 0 end
end
return out
