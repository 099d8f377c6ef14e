-- cold_filter.lua: the probe of a tag's cold-cell filter (tiers/coldfilter.go
-- has the format; migrate/PROTOCOL.md why no cold count is missed). It is
-- not a script of its own: HotStore puts it in front of hot_fixed.lua and
-- hot_check.lua, which call cold_maybe for a cell with no hot key and no
-- directory field.
--
-- cold_maybe(fkey, field) -> maybe, version
--   fkey     the filter key of the cell's tag (absent: no cell of the tag
--            was ever switched to cold)
--   field    the cell's warm bucket field (its cell id's bytes 8..13 used)
--   maybe    true when every probed bit is set in some layer: the cell may
--            be cold (or this is a false positive); false: it is not cold
--   version  the filter's 4-byte version ('' when there is no filter); a
--            switch to cold changes it, so a "not cold" confirmed at one
--            version holds while the version is the same

-- cold_pos returns the cell's 24-bit block hash and its 4 bit positions
-- (0..63) within a 64-bit block.
local function cold_pos(field)
  local b1, b2, b3, b4, b5, b6 = string.byte(field, 1, 6)
  local x = (b1 * 256 + b2) * 256 + b3
  return x, {
    math.floor(b4 / 4),
    (b4 % 4) * 16 + math.floor(b5 / 16),
    (b5 % 16) * 4 + math.floor(b6 / 64),
    b6 % 64,
  }
end

-- cold_u32 reads the big-endian uint32 at byte i (1-based) of s.
local function cold_u32(s, i)
  local a, b, c, d = string.byte(s, i, i + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

-- cold_has reports whether every position is set in the 8-byte block blk.
local function cold_has(blk, pos)
  if #blk < 8 then return false end
  for k = 1, 4 do
    local p = pos[k]
    local byte = string.byte(blk, math.floor(p / 8) + 1)
    if math.floor(byte / 2 ^ (7 - p % 8)) % 2 == 0 then return false end
  end
  return true
end

local function cold_maybe(fkey, field)
  local h = redis.call('GETRANGE', fkey, 0, 76) -- the header and up to 16 layers
  if #h < 13 then return false, '' end
  local layers = string.byte(h, 13)
  if #h < 13 + 4 * layers then h = redis.call('GETRANGE', fkey, 0, 12 + 4 * layers) end
  local x, pos = cold_pos(field)
  local off = 13 + 4 * layers
  for j = 0, layers - 1 do
    local nb = cold_u32(h, 14 + 4 * j)
    local at = off + (x % nb) * 8
    if cold_has(redis.call('GETRANGE', fkey, at, at + 7), pos) then
      return true, string.sub(h, 1, 4)
    end
    off = off + nb * 8
  end
  return false, string.sub(h, 1, 4)
end

