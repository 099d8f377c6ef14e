-- directory_write.lua: the directory's writes, and the helpers of the
-- mover's scripts that read many cells a call; after directory.lua, in
-- front of every script but the check scripts (hot_fixed.lua,
-- hot_check.lua), which never write the directory: a script's local
-- functions are made again at every call, so each one a check script does
-- not use would cost every check (tiers/directory.go, dirScript).

local WARM_MAX_BUCKETS = 65536

local function dir_u32s(v)
  return string.char(math.floor(v / 16777216) % 256, math.floor(v / 65536) % 256,
    math.floor(v / 256) % 256, v % 256)
end

-- dir_header returns the tag's header, parsed (and cached for this call):
-- dir_header_if's, or for a tag without one (only hot cells: the common
-- case) an empty header that the script's writes fill in.
local function dir_header(hkey)
  local h = dir_header_if(hkey)
  if h then return h end
  h = { key = hkey, base = string.sub(hkey, 1, -2), warm = false, level = 0, split = 0,
    version = '\0\0\0\0', total = 0, last = 0, sizes = {} }
  dir_cache = dir_cache or {}
  dir_cache[hkey] = h
  return h
end

-- dir_header_at returns the header whose index into KEYS is the ARGV
-- value a, cached by a for this call: the mover's scripts name a header
-- per cell, and tonumber calls C's strtod. The cache is made on first use:
-- most scripts that start with this file never use it.
local DIR_BY_ARG
local function dir_header_at(a)
  DIR_BY_ARG = DIR_BY_ARG or {}
  local h = DIR_BY_ARG[a]
  if h then return h end
  h = dir_header(KEYS[tonumber(a)])
  DIR_BY_ARG[a] = h
  return h
end

-- dir_mget returns the values of KEYS[first..#KEYS] (false where a key is
-- absent), indexed from 1: the mover's scripts read their cells' counters
-- with one MGET a call, not one a cell (each redis.call costs Redis about
-- as much as the MGET of a few keys); in slices, as unpack passes at most
-- about 8,000 values.
local function dir_mget(first)
  if first + 3999 >= #KEYS then
    if first > #KEYS then return {} end
    return redis.call('MGET', unpack(KEYS, first))
  end
  local out, n = {}, 0
  for s = first, #KEYS, 4000 do
    local part = redis.call('MGET', unpack(KEYS, s, math.min(s + 3999, #KEYS)))
    for j = 1, #part do out[n + j] = part[j] end
    n = n + #part
  end
  return out
end

-- warm_split moves the fields of the bucket at the split pointer that
-- belong to its new sibling there, and moves the pointer.
local function warm_split(h)
  local n = 2 ^ h.level
  if n + h.split >= WARM_MAX_BUCKETS then return end
  local from = warm_bucket_key(h, h.split)
  local to = warm_bucket_key(h, h.split + n)
  local all = redis.call('HGETALL', from)
  local moved, gone = {}, {}
  for i = 1, #all, 2 do
    if warm_hash(all[i]) % (2 * n) ~= h.split then
      moved[#moved + 1] = all[i]
      moved[#moved + 1] = all[i + 1]
      gone[#gone + 1] = all[i]
    end
  end
  if #gone > 0 then
    redis.call('HSET', to, unpack(moved))
    redis.call('HDEL', from, unpack(gone))
  end
  h.split = h.split + 1
  if h.split == n then
    h.level = h.level + 1
    h.split = 0
  end
  redis.call('SETRANGE', h.key, 1, string.char(h.level, math.floor(h.split / 256), h.split % 256))
end

-- warm_set writes the cell's field. A new field that fills its bucket to
-- 96 splits the tag's next bucket (linear hashing), or the only one at 120:
-- the buckets not yet split at a level hold twice the load of the split
-- ones, and the fullest must stay under redis.conf's
-- hash-max-listpack-entries (128), past which a hash takes ~3x the memory.
local function warm_set(h, field, value)
  if not h.warm then
    redis.call('SETRANGE', h.key, 0, '\1')
    h.warm = true
  end
  local key = warm_key(h, field)
  if redis.call('HSET', key, field, value) == 1 then
    local full = 96
    if h.level == 0 and h.split == 0 then full = 120 end
    if redis.call('HLEN', key) >= full then warm_split(h) end
  end
end

local function warm_del(h, field)
  if h.warm then redis.call('HDEL', warm_key(h, field), field) end
end
