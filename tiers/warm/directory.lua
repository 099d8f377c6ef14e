-- directory.lua: where a fixed-window cell of the tiers lives, read inside
-- the scripts that need it (tiers/directory.go describes the layout); its
-- writes are in directory_write.lua. Not a script of its own: the scripts
-- that touch the directory start with it.
--
-- Per tag (an app's hash tag, or a pool's), under the tag's key base
-- prefix{tag}:
--   base..'d'       the tag's header (a string): warm layout and cold filter
--   base..'w'..2B   warm bucket i (a hash): field = the cell's warm field,
--                   value = its warm record, or 'M' (frozen by a move), or
--                   'H' (hot; written by older versions only)
-- Header: byte 1 flags (1: the tag may have warm fields), byte 2 the warm
-- level L, bytes 3-4 the split pointer S: 2^L + S buckets, grown by linear
-- hashing; bytes 5-12 the cold filter's version and the cells in its last
-- layer, byte 13 its layer count; then 4 bytes a layer (its size in 8-byte
-- blocks), then the layers. Integers are big-endian. A missing header, or
-- a short one, reads as zeros. (13 bytes: with 100 cold cells a tag, the
-- value fits a 128-byte allocation.)
local DIR_HEADER = 13

local function dir_u32(s, i)
  local a, b, c, d = string.byte(s, i, i + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

-- The last byte of the header's first read (DIR_HEADER + 63), as a
-- string: a number argument of redis.call, or tostring, is formatted at
-- every call.
local DIR_HEADER_READ = '76'

-- The headers parsed in this call, made on the first (a check whose keys
-- all exist reads none); false for a tag without a header.
local dir_cache

-- dir_header_if returns the tag's header, parsed (and cached for this
-- call), or false when the tag has none: it has only hot cells, so a cell
-- without a counter is a new hot cell. The check scripts use it alone: a
-- tag without a header costs them no parsed table (a window's first calls
-- in apps of hot cells are most of a fill of new cells: make bench-cells,
-- BenchmarkNewCell_RedisInstructions), only its entry in the cache, which
-- the other cells of the tag in the call (a check's other rules, the
-- call's other checks) then read instead of Redis. The scripts that write
-- use dir_header (directory_write.lua), which makes the table of an empty
-- one.
local function dir_header_if(hkey)
  local h = dir_cache and dir_cache[hkey]
  if h ~= nil then return h end
  local raw = redis.call('GETRANGE', hkey, '0', DIR_HEADER_READ) -- and up to 16 layers
  if raw == '' then
    dir_cache = dir_cache or {}
    dir_cache[hkey] = false
    return false
  end
  if #raw < DIR_HEADER then raw = raw .. string.rep('\0', DIR_HEADER - #raw) end
  local layers = string.byte(raw, DIR_HEADER)
  if #raw < DIR_HEADER + 4 * layers then
    raw = redis.call('GETRANGE', hkey, 0, DIR_HEADER + 4 * layers - 1)
  end
  h = {
    key = hkey,
    base = string.sub(hkey, 1, -2),
    warm = string.byte(raw, 1) % 2 == 1,
    level = string.byte(raw, 2),
    split = string.byte(raw, 3) * 256 + string.byte(raw, 4),
    version = string.sub(raw, 5, 8),
    last = dir_u32(raw, 9),
    sizes = {},
  }
  -- Every layer but the last is full: total is the filter's cells.
  h.total = h.last
  for j = 1, layers do
    h.sizes[j] = dir_u32(raw, DIR_HEADER + 4 * j - 3)
    if j < layers then h.total = h.total + 8 * h.sizes[j] end
  end
  dir_cache = dir_cache or {}
  dir_cache[hkey] = h
  return h
end

-- warm_hash is the bucket hash of a warm field: its first 4 bytes.
local function warm_hash(field)
  return dir_u32(field, 1)
end

local function warm_bucket_key(h, i)
  return h.base .. 'w' .. string.char(math.floor(i / 256), i % 256)
end

-- warm_key returns the key of the bucket that holds field.
local function warm_key(h, field)
  local n = 2 ^ h.level
  local x = warm_hash(field)
  local i = x % n
  if i < h.split then i = x % (2 * n) end
  return warm_bucket_key(h, i)
end

-- warm_get returns the cell's field value, or false.
local function warm_get(h, field)
  if not h.warm then return false end
  return redis.call('HGET', warm_key(h, field), field)
end

-- cold_pos returns the cell's 24-bit block hash and its 4 bit positions
-- (0..63) in a 64-bit block, from its warm field's bytes 1..6, each as its
-- byte in the block (1..8) and its bit's value there: 8 numbers. Computed
-- once a cell, so that a probe of a layer is a byte read and a remainder
-- per position (math.floor is a function call, and ^ calls C's pow). The
-- positions are written into one table a call, not a new table a cell
-- (nor one in a call that probes none): they are good until the next
-- cold_pos. Its entries 9..16 hold the value of bit position p % 8 in its
-- byte at 9 + p % 8 (the first position is a byte's high bit): a table
-- index, where string.byte is a function call.
local COLD_POS
local function cold_pos(field)
  local b1, b2, b3, b4, b5, b6 = string.byte(field, 1, 6)
  local p1 = (b4 - b4 % 4) / 4
  local p2 = (b4 % 4) * 16 + (b5 - b5 % 16) / 16
  local p3 = (b5 % 16) * 4 + (b6 - b6 % 64) / 64
  local p4 = b6 % 64
  local pos = COLD_POS or { 0, 0, 0, 0, 0, 0, 0, 0, 128, 64, 32, 16, 8, 4, 2, 1 }
  COLD_POS = pos
  pos[1], pos[2] = (p1 - p1 % 8) / 8 + 1, pos[p1 % 8 + 9]
  pos[3], pos[4] = (p2 - p2 % 8) / 8 + 1, pos[p2 % 8 + 9]
  pos[5], pos[6] = (p3 - p3 % 8) / 8 + 1, pos[p3 % 8 + 9]
  pos[7], pos[8] = (p4 - p4 % 8) / 8 + 1, pos[p4 % 8 + 9]
  return (b1 * 256 + b2) * 256 + b3, pos
end

-- cold_has reports whether every position of pos is set in the 8-byte
-- block that starts after byte offset base of s.
local function cold_has(s, base, pos)
  if #s < base + 8 then return false end
  for k = 1, 7, 2 do
    local bit = pos[k + 1]
    if string.byte(s, base + pos[k]) % (bit + bit) < bit then return false end
  end
  return true
end

-- cold_block returns the 8-byte filter block at byte offset at of the
-- tag's header, as a string and the offset in it the block follows (a
-- block of the script's copy is not cut out of it). A script that probes
-- many cells of a tag (the mover's) sets h.probes to their number first;
-- when one GET of the whole header costs less than a GETRANGE per layer
-- and probe (a GETRANGE costs Redis about as much as copying 1.2 KB into
-- Lua), the blocks are read from that copy, with the blocks the script
-- wrote since (cold_switch.lua's set_block) over it.
-- The check scripts probe one cell: a GETRANGE a layer.
local function cold_block(h, at)
  if h.raw == nil then
    h.raw = false
    if h.probes and #h.sizes > 0 then
      local bytes = DIR_HEADER + 4 * #h.sizes
      for j = 1, #h.sizes do bytes = bytes + 8 * h.sizes[j] end
      if bytes <= 1200 * h.probes * #h.sizes then
        h.raw = redis.call('GET', h.key) or ''
        h.patch = {}
      end
    end
  end
  if h.raw then
    local blk = h.patch[at]
    if blk then return blk, 0 end
    return h.raw, at
  end
  return redis.call('GETRANGE', h.key, at, at + 7), 0
end

-- cold_holds reports whether a layer of h's filter holds the cell whose
-- block hash and bit positions are x and pos (cold_pos).
local function cold_holds(h, x, pos)
  local off = DIR_HEADER + 4 * #h.sizes
  for j = 1, #h.sizes do
    local at = off + (x % h.sizes[j]) * 8
    local blk, base = cold_block(h, at)
    if cold_has(blk, base, pos) then return true end
    off = off + h.sizes[j] * 8
  end
  return false
end

-- cold_maybe reports whether the tag's cold filter holds the cell (it may
-- be cold; false: it is not), and the filter's version.
local function cold_maybe(h, field)
  if #h.sizes == 0 then return false, h.version end
  local x, pos = cold_pos(field)
  return cold_holds(h, x, pos), h.version
end
