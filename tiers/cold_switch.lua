-- cold_switch.lua: the switch step of moves into the cold tier (package
-- migrate): for each cell, atomically, delete its directory field if it
-- holds the expected (frozen) value, and add the cell to its tag's cold
-- filter (tiers/coldfilter.go), changing the filter's version. A check that
-- finds no hot key, no field and no filter bit for a cell therefore knows,
-- in the same atomic step, that the cell is not cold (migrate/PROTOCOL.md).
-- All cells of one call share the tag (and so the hash slot).
--
-- KEYS[1]  the tag's filter (a string; created on first use)
-- KEYS[2..]  warm bucket hashes, referred to by index
-- ARGV[1]  capacity, in cells, of a layer this call has to add (the caller's
--          estimate of the tag's cells still to come; at least the cells of
--          this call)
-- ARGV[2 + 3*(i-1) ...]  per cell i: bucket key index (into KEYS), field
--          (the cell's, >= 6 bytes), expected value
--
-- Reply: per cell 1 (switched and added) or 0 (the field held another
-- value: nothing changed for that cell).
--
-- Filter format: header of 13 bytes (version, total cells, cells in the
-- last layer: big-endian uint32 each; layer count: 1 byte), then 4 bytes
-- per layer (its size in 8-byte blocks), then the layers' blocks in order.
-- A cell is added to the last layer only: earlier layers are full.

local fkey = KEYS[1]

local function u32(v)
  return string.char(math.floor(v / 16777216) % 256, math.floor(v / 65536) % 256,
    math.floor(v / 256) % 256, v % 256)
end

local h = redis.call('GETRANGE', fkey, 0, 12)
local version, total, last, layers = 0, 0, 0, 0
if #h == 13 then
  version, total, last = cold_u32(h, 1), cold_u32(h, 5), cold_u32(h, 9)
  layers = string.byte(h, 13)
end
local sizes = {}
if layers > 0 then
  local t = redis.call('GETRANGE', fkey, 13, 12 + 4 * layers)
  for j = 1, layers do sizes[j] = cold_u32(t, 4 * j - 3) end
end

-- add_layer appends a layer of at least want cells (8 a block), and at
-- least the size of all earlier layers together, so that the layer count
-- grows with the log of the tag's cold cells. The header grows by 4 bytes,
-- so the whole value is written again (rare: once per layer).
local function add_layer(want)
  local sum = 0
  for j = 1, layers do sum = sum + sizes[j] end
  local nb = math.max(math.ceil(want / 8), sum, 1)
  if layers == 255 then return false end
  local old = redis.call('GET', fkey) or ''
  local data = string.sub(old, 14 + 4 * layers)
  layers = layers + 1
  sizes[layers] = nb
  last = 0
  local tbl = {}
  for j = 1, layers do tbl[j] = u32(sizes[j]) end
  redis.call('SET', fkey, u32(version) .. u32(total) .. u32(last) .. string.char(layers) ..
    table.concat(tbl) .. data .. string.rep('\0', nb * 8))
  return true
end

local function add(field, remaining)
  if layers == 0 or last >= sizes[layers] * 8 then
    if not add_layer(math.max(tonumber(ARGV[1]) - total, remaining, total)) then
      return redis.error_reply('cold filter: 255 layers')
    end
  end
  local off = 13 + 4 * layers
  for j = 1, layers - 1 do off = off + sizes[j] * 8 end
  local x, pos = cold_pos(field)
  local at = off + (x % sizes[layers]) * 8
  local b = { string.byte(redis.call('GETRANGE', fkey, at, at + 7), 1, 8) }
  for k = 1, 4 do
    local p = pos[k]
    local i = math.floor(p / 8) + 1
    local bit = 2 ^ (7 - p % 8)
    if math.floor(b[i] / bit) % 2 == 0 then b[i] = b[i] + bit end
  end
  redis.call('SETRANGE', fkey, at, string.char(unpack(b)))
  total = total + 1
  last = last + 1
end

local out = {}
local changed = false
local n = (#ARGV - 1) / 3
for i = 1, n do
  local base = 2 + 3 * (i - 1)
  local bucket = KEYS[tonumber(ARGV[base])]
  local field = ARGV[base + 1]
  local cur = redis.call('HGET', bucket, field) or ''
  if cur == ARGV[base + 2] then
    if cur ~= '' then redis.call('HDEL', bucket, field) end
    local err = add(field, n - i + 1)
    if err then return err end
    changed = true
    out[i] = 1
  else
    out[i] = 0
  end
end
if changed then
  redis.call('SETRANGE', fkey, 0, u32((version + 1) % 4294967296) .. u32(total) .. u32(last))
end
return out
