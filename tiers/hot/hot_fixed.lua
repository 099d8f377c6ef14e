-- hot_fixed.lua: hot_check.lua's fast path for checks whose cells are all
-- fixed_window (the platform quotas): decide each check against its cells
-- and, when its mode and its decision say so, count it, one check after
-- the other, each as if sent alone, in one atomic step. It reads and
-- writes the keys in the same form as hot_check.lua (an integer string
-- whose TTL is set when the key is created), and reads the directory as
-- hot_check.lua does, so the two can serve the same cells; refunds stay
-- with hot_check.lua. It exists because the general script costs Redis
-- markedly more per check (make bench-algorithms), and it takes several
-- checks a call because a script call's own cost (its argument tables,
-- the directory functions' closures) is as much as a check's work
-- (BenchmarkPlatformChecks_RedisInstructions).
--
-- KEYS       the Redis keys of every check's cells, check after check
--            (all keys in one hash slot); then, with the directory, the
--            cells' tags' headers in the same order (directory.lua): the
--            header of KEYS[x] is KEYS[x + #KEYS/2]
-- ARGV[1]    1: every cell has a directory entry, else 0
-- then per check, in order:
--   cost     an integer >= 1
--   mode     0 enforce (count only if every non-shadow cell allows),
--            1 dry run (count nothing), 2 report (count unconditionally)
--   n        its number of cells
--   per cell i, 5 values: limit; the TTL in milliseconds of a key this
--            call creates (until its window ends, plus jitter); shadow
--            (0|1); its field in the warm bucket ('' without the
--            directory); the cold filter version at which the router
--            found the cell not cold ('' if it did not look)
--
-- Directory (as hot_check.lua's "Directory"): a cell whose key does not
-- exist is looked up in its warm bucket field. One EXISTS over every
-- header first: in a call whose tags have none (apps of hot cells only,
-- the usual new cells), no cell reads one. No field: the cold filter
-- says whether it may be cold; if not (or if the router found it not cold
-- at the filter's current version), it is hot, counted here, a new cell
-- costing nothing more. 'H' (written by older versions): hot. 'M': being
-- moved. Anything else: its warm record. A cell not hot is neither peeked
-- nor counted; the other cells are decided and counted as if they were the
-- whole check.
--
-- Reply, per check in order: for each cell, its count before this call
-- (>= 0) when it is hot; else -4 followed by the filter version (may be
-- cold: the router asks MySQL), -2 (moving), or -1 followed by the warm
-- record (a string). Then 1 if the cost was counted, else 0. The caller
-- derives allowed, remaining, reset and retry from the counts exactly as
-- hot_check.lua's fixed_window does (HotStore.decodeFixed).

-- dir: a cell may be placed elsewhere, so a missing key is looked up;
-- h: the offset of a cell's header key from its own; headers: whether
-- any of the call's tags has a header, learnt at the first missing key
-- (the call writes none).
local dir = ARGV[1] == '1'
local h = dir and #KEYS / 2 or 0
local headers = nil
local reply = {}
-- k: the keys before this check's; a: the values before its own
-- (ARGV[a+1 ..]). Writes pass the cost's string itself: Redis formats a
-- number argument of redis.call as a float at every call. Strings become
-- numbers by arithmetic (s + 0), which calls C's strtod once, where
-- tonumber calls it twice (lua_isnumber, then lua_tonumber), and strtod is
-- among a check's largest costs in Redis (a callgrind profile of it); the
-- mode is compared as a string. The loop's body is not a function: a closure
-- made at every call costs a lone check more.
local k, a = 0, 1
while a < #ARGV do
  local cost_s, mode, n = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3] + 0
  local cost = cost_s + 0
  local used = {}
  local all = true
  local here = 0
  for i = 1, n do
    local c = a + 3 + 5 * (i - 1) -- the cell's values are ARGV[c+1 .. c+5]
    local v = redis.call('GET', KEYS[k + i])
    local where = nil
    local version = nil
    if not v and dir and headers == nil then
      -- With one tag, its header is read anyway; with several, one EXISTS
      -- answers for all (unpack's bound: Lua 5.1's C stack, 8,000).
      headers = true
      local one = true
      for x = h + 2, #KEYS do
        if KEYS[x] ~= KEYS[h + 1] then one = false break end
      end
      if not one and h <= 1000 then
        headers = redis.call('EXISTS', unpack(KEYS, h + 1, #KEYS)) > 0
      end
    end
    if not v and headers then
      local hdr = dir_header_if(KEYS[k + i + h])
      if hdr then
        local d = warm_get(hdr, ARGV[c + 4])
        if d then
          if d ~= 'H' then where = d end
        else
          local maybe, ver = cold_maybe(hdr, ARGV[c + 4])
          if maybe and ver ~= ARGV[c + 5] then
            where = ''
            version = ver
          end
        end
      end
    end
    if where == nil then
      local u = v and v + 0 or 0
      used[i] = u
      here = here + 1
      reply[#reply + 1] = u
      if u + cost > ARGV[c + 1] + 0 and ARGV[c + 3] ~= '1' then all = false end
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
  if here > 0 and (mode == '2' or (mode == '0' and all)) then
    for i = 1, n do
      local u = used[i]
      if u == 0 then
        redis.call('SET', KEYS[k + i], cost_s, 'PX', ARGV[a + 5 * i])
      elseif u then
        redis.call('INCRBY', KEYS[k + i], cost_s)
      end
    end
    reply[#reply + 1] = 1
  else
    reply[#reply + 1] = 0
  end
  k = k + n
  a = a + 3 + 5 * n
end
return reply
