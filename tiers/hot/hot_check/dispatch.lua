-- hot_check/dispatch.lua: the tail of hot_check.lua (tiers/hot.go joins
-- preamble.lua, the five algorithm files and this). It reads the cells of
-- KEYS and ARGV (preamble.lua's header) and the directory triples, decides
-- the check through each cell's algorithm and returns the reply the header
-- describes: 4 integers per cell, then 1 if the cost was counted, else 0.

local n = #KEYS - ndir
local cells = {}
local algorithms = {}
for i = 1, n do
  local base = 4 + STRIDE * (i - 1)
  local code = ARGV[base]
  if algorithms[code] == nil then
    local build = builders[tonumber(code)]
    if build then algorithms[code] = build() end
  end
  local c = {
    key = KEYS[i],
    algo = algorithms[ARGV[base]],
    limit = tonumber(ARGV[base + 1]),
    window = tonumber(ARGV[base + 2]),
    jitter = tonumber(ARGV[base + 3]),
    shadow = ARGV[base + 4] == '1',
  }
  if c.algo == nil then
    return redis.error_reply('unknown algorithm ' .. ARGV[base])
  end
  cells[i] = c
end
for j = 1, ndir do
  local base = 4 + STRIDE * n + 3 * (j - 1)
  local c = cells[tonumber(ARGV[base])]
  if redis.call('EXISTS', c.key) == 0 then
    local h = dir_header_if(KEYS[n + j])
    local v = h and warm_get(h, ARGV[base + 1])
    if v then
      if v ~= 'H' then c.where = v end
    elseif h then
      local maybe, ver = cold_maybe(h, ARGV[base + 1])
      if maybe and ver ~= ARGV[base + 2] then
        c.where = ''
        c.version = ver
      end
    end
  end
end

local reply = {}
local function put(c, ok, post)
  if c.where then
    local code = -1
    if c.where == 'M' then code = -2 elseif c.where == '' then code = -4 end
    reply[#reply + 1] = code
    if code == -1 then
      reply[#reply + 1] = c.where
    elseif code == -4 then
      reply[#reply + 1] = c.version
    else
      reply[#reply + 1] = 0
    end
    reply[#reply + 1] = 0
    reply[#reply + 1] = 0
    return
  end
  local remaining, reset, retry = c.algo.metrics(c, post)
  if remaining < 0 then remaining = 0 end
  if ok then retry = 0 end
  local okn = 0
  if ok then okn = 1 end
  reply[#reply + 1] = okn
  reply[#reply + 1] = remaining
  reply[#reply + 1] = reset
  reply[#reply + 1] = retry
end

local commit = false
if mode == 3 then
  for i = 1, n do
    local c = cells[i]
    if c.where then
      put(c, false, false)
    else
      c.algo.refund(c)
      put(c, c.algo.peek(c), false)
    end
  end
else
  local all = true
  local here = 0
  for i = 1, n do
    local c = cells[i]
    if not c.where then
      here = here + 1
      c.allowed = c.algo.peek(c)
      if not c.allowed and not c.shadow then all = false end
    end
  end
  commit = here > 0 and ((mode == 2) or (mode == 0 and all))
  -- Remaining is what is left after this call when it is (or, in a dry
  -- run, would be) counted, and what is left now when it is denied.
  local post = commit or (mode == 1 and all)
  for i = 1, n do put(cells[i], cells[i].allowed, post) end
  if commit then
    for i = 1, n do
      if not cells[i].where then cells[i].algo.commit(cells[i]) end
    end
  end
end

if commit then reply[#reply + 1] = 1 else reply[#reply + 1] = 0 end
return reply
