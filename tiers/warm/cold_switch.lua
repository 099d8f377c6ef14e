-- cold_switch.lua: the switch step of moves into the cold tier (package
-- migrate), after directory.lua: for each cell, atomically, delete its
-- directory field if it holds the expected (frozen) value, and add the cell
-- to its tag's cold filter, changing the filter's version. A check that
-- finds no hot key, no field and no filter bit for a cell therefore knows,
-- in the same atomic step, that the cell is not cold (migrate/PROTOCOL.md).
-- One call may switch the cells of several tags (all in one hash slot: one
-- call per tag on a cluster, one for all on a single Redis).
--
-- KEYS     the tags' headers (directory.lua; created on first use), then,
--          with counters (below), the counters of this window and the next
--          of each cell, in cell order
-- ARGV[1]  K, the number of headers
-- ARGV[1+k], k = 1..K  capacity, in cells, of a layer this call has to add
--          to tag k's filter (the caller's estimate of the tag's cold cells
--          to come; at least this call's)
-- ARGV[1+K+k], k = 1..K  the number of cells of header k: the cells come
--          in header order, header 1's first
-- ARGV[2K+2] '1': the cells' counters follow the headers in KEYS; '0':
--          none
-- then 2 values per cell: its warm field (>= 6 bytes of its cell id),
--          and without counters the field's expected value ('' =
--          absent), with counters (the field must be absent) the expected
--          value of its counter of this window ('' = none). Its counter of
--          the next window must not exist.
--
-- Reply: per cell 1 (switched and in the filter) or 0 (the field held
-- another value, a counter did not hold what was expected, or a cell with
-- a count was in the filter before this call: nothing changed for that
-- cell). Switching a cell whose field is absent ('' expected) only makes
-- sure the filter holds it: the rebuild of a filter
-- Redis lost (migrate.Worker.RebuildColdFilters), and, with counters, the
-- move of a quiet cell (hot_state.lua), whose counters must still hold
-- what was copied to its cold row when it becomes cold; its counter is
-- deleted in the same step (migrate/PROTOCOL.md, invariant 1). A quiet
-- cell with a count (its expected counter neither '' nor '0') is switched
-- only if the filter did not hold it before this call: its mover found no
-- bit (hot_state.lua), and bits are set only by a switch into cold, so
-- bits since mean the cell went cold meanwhile, maybe cold and back with
-- the same count and its row gone ("Quiet cells": this replaces a lease).
--
-- Cells are added to the last layer only: earlier layers are full. A full
-- last layer gets a successor at least as large as all earlier layers
-- together, so a tag's layers grow with the log of its cold cells.

local K = tonumber(ARGV[1])
local counters = ARGV[2 * K + 2] == '1'

-- set_block writes an 8-byte filter block of h at byte offset at: at
-- once, or, when the script reads the blocks from a copy of the header
-- (cold_block), into the copy's patches, which flush writes - one SETRANGE
-- a block however many of the call's cells set bits in it.
local function set_block(h, at, blk)
  if h.raw then
    h.patch[at] = blk
    h.dirty = true
  else
    redis.call('SETRANGE', h.key, at, blk)
  end
end

-- flush writes the blocks set_block kept in h's patches.
local function flush(h)
  if not h.dirty then return end
  for at, blk in pairs(h.patch) do redis.call('SETRANGE', h.key, at, blk) end
  h.dirty = false
end

-- add_layer appends a layer of at least want cells (8 a block) to h's
-- filter. The layer table grows by 4 bytes, so the value is written again
-- (once a layer), and every block's offset moves.
local function add_layer(h, want)
  local sum = 0
  for j = 1, #h.sizes do sum = sum + h.sizes[j] end
  if #h.sizes == 255 then return false end
  local nb = math.max(math.ceil(want / 8), sum, 1)
  flush(h)
  local old = redis.call('GET', h.key) or ''
  if #old < DIR_HEADER then old = old .. string.rep('\0', DIR_HEADER - #old) end
  local data = string.sub(old, DIR_HEADER + 4 * #h.sizes + 1)
  h.sizes[#h.sizes + 1] = nb
  h.last = 0
  local tbl = {}
  for j = 1, #h.sizes do tbl[j] = dir_u32s(h.sizes[j]) end
  local value = string.sub(old, 1, DIR_HEADER - 1) .. string.char(#h.sizes) ..
    table.concat(tbl) .. data .. string.rep('\0', nb * 8)
  redis.call('SET', h.key, value)
  if h.raw then
    h.raw = value
    h.patch = {}
  end
  return true
end

-- The bytes of the block add changes, a table made once a call.
local block = {}

-- add sets the bits of the cell whose block hash and positions are x and
-- pos (cold_pos) in the last layer of h's filter, the header KEYS[k];
-- remaining is the number of the tag's cells this call has still to
-- switch.
local function add(h, k, x, pos, remaining)
  h.start_layers = h.start_layers or #h.sizes
  local layers = #h.sizes
  if layers == 0 or h.last >= h.sizes[layers] * 8 then
    local capacity = tonumber(ARGV[1 + k])
    if not add_layer(h, math.max(capacity - h.total, remaining, h.total)) then
      return redis.error_reply('cold filter: 255 layers')
    end
    layers = #h.sizes
  end
  local off = DIR_HEADER + 4 * layers
  for j = 1, layers - 1 do off = off + h.sizes[j] * 8 end
  local bi = x % h.sizes[layers]
  local at = off + bi * 8
  local blk, base = cold_block(h, at)
  if layers == h.start_layers then
    -- The block as it was before this call (held_before).
    h.orig = h.orig or {}
    h.orig[bi] = h.orig[bi] or string.sub(blk, base + 1, base + 8)
  end
  local b = block
  b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8] = string.byte(blk, base + 1, base + 8)
  for k = 1, 7, 2 do
    local i, bit = pos[k], pos[k + 1]
    if b[i] % (bit + bit) < bit then b[i] = b[i] + bit end
  end
  set_block(h, at, string.char(b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8]))
  h.total = h.total + 1
  h.last = h.last + 1
end

-- held_before reports whether h's filter held the cell (x, pos: cold_pos)
-- before this call: its layers then, the blocks add changed as they were.
-- Only the last of those layers can have changed (earlier ones are full).
local function held_before(h, x, pos)
  local layers = h.start_layers or #h.sizes
  local off = DIR_HEADER + 4 * #h.sizes
  for j = 1, layers do
    local bi = x % h.sizes[j]
    local blk, base
    if j == layers and h.orig and h.orig[bi] then
      blk, base = h.orig[bi], 0
    else
      blk, base = cold_block(h, off + bi * 8)
    end
    if cold_has(blk, base, pos) then return true end
    off = off + h.sizes[j] * 8
  end
  return false
end

local out = {}
local changed = {}
-- The counters of the cells switched, deleted together by finish: one
-- DEL a call, not one a cell.
local gone = {}

-- finish deletes the switched cells' counters and writes the changed
-- filters' kept blocks, versions and counts: at the end, and before an
-- error leaves the call (the cells switched until then stay switched, so
-- their counters must be gone and their filters must say so).
local function finish()
  for j = 1, #gone, 4000 do
    redis.call('DEL', unpack(gone, j, math.min(j + 3999, #gone)))
  end
  for h in pairs(changed) do
    flush(h)
    h.version = dir_u32s((dir_u32(h.version, 1) + 1) % 4294967296)
    redis.call('SETRANGE', h.key, 4, h.version .. dir_u32s(h.last))
  end
end

-- The cells' counters, read at once; a counter this call deleted (a cell
-- twice in a call) reads as absent.
local counts = counters and dir_mget(K + 1)
local deleted = {}
local live = K -- the KEYS index before the cell's counters

-- switch_cell switches the cell whose ARGV values start at i, of header
-- KEYS[k] (h), remaining the header's cells still to switch with it; it
-- returns an error reply if the filter cannot take the cell.
local function switch_cell(h, k, i, remaining)
  local field, arg = ARGV[i], ARGV[i + 1]
  local cur = warm_get(h, field) or ''
  local expected, quiet, count, counted = arg, true, nil, false
  if counters then
    expected = ''
    live = live + 2
    count = not deleted[KEYS[live - 1]] and counts[live - K - 1]
    quiet = not counts[live - K] and (count or '') == arg
    counted = arg ~= '' and arg ~= '0'
  end
  local switch, x, pos, held = cur == expected and quiet, nil, nil, nil
  if switch then
    x, pos = cold_pos(field)
    held = cold_holds(h, x, pos)
    switch = not (held and counted and held_before(h, x, pos))
  end
  if not switch then
    out[#out + 1] = 0
    return
  end
  -- A cell the filter already holds (it was cold before, or a false
  -- positive) needs no bits; the version changes all the same.
  if not held then
    local err = add(h, k, x, pos, remaining)
    if err then return err end
  end
  if cur ~= '' then warm_del(h, field) end
  if count then
    gone[#gone + 1] = KEYS[live - 1]
    deleted[KEYS[live - 1]] = true
  end
  changed[h] = true
  out[#out + 1] = 1
end

local i = 2 * K + 3 -- the cell's first ARGV
for k = 1, K do
  local h, n = dir_header(KEYS[k]), tonumber(ARGV[1 + K + k])
  h.probes = n -- cold_block
  for remaining = n, 1, -1 do
    local err = switch_cell(h, k, i, remaining)
    if err then
      finish()
      return err
    end
    i = i + 2
  end
end
finish()
return out
