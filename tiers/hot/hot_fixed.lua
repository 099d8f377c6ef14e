-- hot_fixed.lua: hot_check.lua's fast path for a check whose cells are all
-- fixed_window (the platform quotas): decide the check against its cells
-- and, when the mode and the decision say so, count it, in one atomic step.
-- It reads and writes the keys in the same form as hot_check.lua (an
-- integer string whose TTL is set when the key is created), and reads the
-- directory as hot_check.lua does, so the two can serve the same cells;
-- refunds stay with hot_check.lua. It exists because the general script
-- costs Redis markedly more per check (make bench-algorithms).
--
-- KEYS[i]    the Redis key of cell i, i = 1..n (all keys in one hash slot)
-- KEYS[n+i]  with the directory: cell i's tag's header (directory.lua)
-- ARGV[1]    cost, an integer >= 1
-- ARGV[2]    mode: 0 enforce (count only if every non-shadow cell allows),
--            1 dry run (count nothing), 2 report (count unconditionally)
-- ARGV[3]    1: every cell has a directory entry (#KEYS = 2n), else 0 (#KEYS = n)
-- ARGV[5i-1 .. 5i+3]  per cell i: limit; the TTL in milliseconds of a key
--            this call creates (until its window ends, plus jitter); shadow
--            (0|1); its field in the warm bucket ('' without the
--            directory); the cold filter version at which the router found
--            the cell not cold ('' if it did not look)
--
-- Directory (as hot_check.lua's "Directory"): a cell whose key does not
-- exist is looked up in its warm bucket field. No field: the cold filter
-- says whether it may be cold; if not (or if the router found it not cold
-- at the filter's current version), it is hot, counted here, a new cell
-- costing nothing more. 'H' (written by older versions): hot. 'M': being
-- moved. Anything else: its warm record. A cell not hot is neither peeked
-- nor counted; the other cells are decided and counted as if they were the
-- whole check.
--
-- Reply: for each cell in order, its count before this call (>= 0) when it
-- is hot; else -4 followed by the filter version (may be cold: the router
-- asks MySQL), -2 (moving), or -1 followed by the warm record (a string).
-- Then 1 if the cost was counted, else 0. The caller derives allowed,
-- remaining, reset and retry from the counts exactly as hot_check.lua's
-- fixed_window does (HotStore.decodeFixed).

local cost = tonumber(ARGV[1])
-- Writes pass ARGV[1] itself: Redis formats a number argument of
-- redis.call as a float at every call. The mode is compared as a string:
-- tonumber calls C's strtod.
local mode = ARGV[2]
local n = #KEYS
local dir = ARGV[3] == '1'
if dir then n = n / 2 end
local reply = {}
local used = {}
local all = true
local here = 0
for i = 1, n do
  local v = redis.call('GET', KEYS[i])
  local where = nil
  local version = nil
  if not v and dir then
    local h = dir_header_if(KEYS[n + i])
    if h then
      local d = warm_get(h, ARGV[5 * i + 2])
      if d then
        if d ~= 'H' then where = d end
      else
        local maybe, ver = cold_maybe(h, ARGV[5 * i + 2])
        if maybe and ver ~= ARGV[5 * i + 3] then
          where = ''
          version = ver
        end
      end
    end
  end
  if where == nil then
    local u = v and tonumber(v) or 0
    used[i] = u
    here = here + 1
    reply[#reply + 1] = u
    if u + cost > tonumber(ARGV[5 * i - 1]) and ARGV[5 * i + 1] ~= '1' then all = false end
  elseif where == '' then
    reply[#reply + 1] = -4
    reply[#reply + 1] = version
  elseif where == 'M' then
    reply[#reply + 1] = -2
  else
    reply[#reply + 1] = -1
    reply[#reply + 1] = where
  end
end
local commit = here > 0 and (mode == '2' or (mode == '0' and all))
if commit then
  for i = 1, n do
    local u = used[i]
    if u == 0 then
      redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[5 * i])
    elseif u then
      redis.call('INCRBY', KEYS[i], ARGV[1])
    end
  end
  reply[#reply + 1] = 1
else
  reply[#reply + 1] = 0
end
return reply
