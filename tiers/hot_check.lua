-- hot_check.lua: decide one limit check against its hot-tier cells and, when
-- the mode and the decision say so, count it - all in one atomic step.
--
-- KEYS[i]  the Redis key of cell i (one key per cell; all in one hash slot)
-- ARGV[1]  now, milliseconds since the Unix epoch (the caller's clock, so tests drive time)
-- ARGV[2]  cost, an integer >= 1
-- ARGV[3]  mode: 0 enforce (count only if every non-shadow cell allows),
--          1 dry run (count nothing), 2 report (count unconditionally),
--          3 refund (give back a cost counted earlier at the same `now`);
--          +8 debug: the reply ends with one more integer, the number of
--          stored values the script read (hash fields, string values)
-- ARGV[4 + 5*(i-1) ...]  per cell i: algorithm, limit, window_ms, ttl_jitter_ms, shadow (0|1)
--          algorithm: 1 fixed_window, 2 sliding_window, 3 token_bucket,
--          4 sliding_log, 5 min_interval
--
-- Reply: for each cell, 4 integers: allowed (0|1), remaining, reset_after_ms,
-- retry_after_ms; then 1 integer: 1 if the cost was counted, else 0.
-- remaining, reset_after_ms and retry_after_ms describe the state after the
-- call when it is counted (or, in a dry run, would be), else the state now;
-- retry_after_ms is 0 when the cell allows. In refund mode the reply
-- describes each cell after the refund, as for a call that was not counted.
--
-- Directory (mode +16, fixed_window cells only; package tiers, router.go
-- and coldfilter.go): a cell with a directory entry whose own key does not
-- exist is looked up in its warm bucket field. No field: the cell is hot
-- (new, or its key expired) unless its tag's cold filter says it may be
-- cold and the router has not found it not cold at the filter's current
-- version. 'H' (older versions): hot. 'M' (being moved) or anything else
-- (the cell's warm record): elsewhere. A cell not hot is neither peeked
-- nor counted, and its 4 reply values are -1 (warm) | -2 (moving) | -4
-- (may be cold: the router asks MySQL), then for -1 the raw record and for
-- -4 the filter version (strings), then 0s. The other (hot) cells are
-- decided and counted as if they were the whole check; the router decides
-- the rest in warm/cold and refunds this part if the whole check is
-- denied. A hot key that exists costs no lookup: a key exists only while
-- its cell is hot (a move out of hot renames it away in the same step
-- that writes 'M').
--
-- The Go reference models in internal/tiermodel have the same integer semantics; the
-- differential test holds the two together.

local now = tonumber(ARGV[1])
local cost = tonumber(ARGV[2])
local mode = tonumber(ARGV[3])
local debug = false
-- +16 directory: the last ARGV is d, the number of directory entries; the
-- last d KEYS are the cells' tags' headers (directory.lua), and after the
-- cells' ARGV come d triples (cell index, field, version at which the
-- router found the cell not cold or ''). See "Directory" above.
local ndir = 0
if mode >= 16 then
  mode = mode - 16
  ndir = tonumber(ARGV[#ARGV])
end
if mode >= 8 then
  debug = true
  mode = mode - 8
end
local STRIDE = 5
local reads = 0 -- stored values read (debug reply)

local floor = math.floor

-- fmt writes an integer-valued number exactly (tostring would switch to
-- exponent notation past 14 digits).
local function fmt(x) return string.format('%.0f', x) end

-- ceildiv(a, b) = ceil(a / b) for integers 0 <= a <= 2^53, b >= 1. floor of
-- the double quotient is exact below 2^53.
local function ceildiv(a, b)
  local q = floor(a / b)
  if q * b < a then q = q + 1 end
  return q
end

-- Each algorithm has:
--   peek(c)          read the cell's state into c, return whether a call of
--                    `cost` fits (counts nothing; sliding_window may write
--                    back its running count, which changes no answer)
--   metrics(c, post) remaining, reset_ms, retry_ms of the state after the
--                    call is counted (post) or of the state now; retry is
--                    for another call of `cost` (no writes; may read)
--   commit(c)        count the call
--   refund(c)        give back a call of `cost` counted at `now`
--
-- builders[code]() makes an algorithm's functions: only the algorithms a
-- check uses are built (defining them all costs every call its time).
local builders = {}

---------------------------------------------------------------------------
-- 1 fixed_window: the key (which includes the window index) holds the count.
builders[1] = function()
  return {
    peek = function(c)
      c.used = tonumber(redis.call('GET', c.key) or '0')
      reads = reads + 1
      return c.used + cost <= c.limit
    end,
    metrics = function(c, post)
      local used = c.used
      if post then used = used + cost end
      local reset = c.window - (now % c.window)
      return c.limit - used, reset, reset
    end,
    commit = function(c)
      if c.used == 0 then
        -- TTL set once, when the key is created: to the window's end plus jitter.
        redis.call('SET', c.key, cost, 'PX', (c.window - (now % c.window)) + c.jitter)
      else
        redis.call('INCRBY', c.key, cost)
      end
    end,
    refund = function(c)
      if redis.call('EXISTS', c.key) == 1 then
        redis.call('DECRBY', c.key, cost)
      end
    end,
  }
end

---------------------------------------------------------------------------
-- 2 sliding_window: calls counted over the trailing window, exact to the
-- second. The window at `now` is the W/1000 whole seconds ending with now's
-- second: a call made in second s counts until (s + W/1000) * 1000 ms.
--
-- One hash per cell holds multi-level buckets; every call increments one
-- bucket per level: "s<sec>", "t<sec/10>", "m<sec/60>", "n<sec/600>",
-- "h<sec/3600>" and, for windows over a day, "d<sec/86400>". Summing the
-- window from the buckets (a "walk") reads 1 s buckets from the window's
-- start up to a 10 s boundary, 10 s buckets up to a minute, minutes up to
-- 10 minutes, 10 minutes up to an hour, then hours (days) up to and
-- including the current one (whose bucket holds only calls up to now): for
-- 24 h at most 9+5+9+5+24 = 52 fields in one HMGET. The second of the k-th
-- oldest call (for reset and retry) descends from the bucket that holds it
-- through its children: at most 6+10+6+10 fields from an hour bucket.
--
-- Field "w" = "cur:cnt:old" keeps the walk's result: cnt calls made in
-- second cur or later, the oldest of them in second old (-1: none). A check
-- whose window starts at s0 >= cur needs no walk while old >= s0 (then the
-- count is cnt); when the oldest calls have just left (s0 - old <= 10) it
-- subtracts their 1 s buckets and looks for the new oldest in the next 3
-- seconds. Only a long-idle identity, time going back, or a sparse history
-- needs the walk. Any check that moves "w" writes it back (never creating
-- the key), and every quarter window a commit recounts it from a walk.
-- Every check reads at most 7 + 13 + 52 + 32 + 10 + 32 = 146 fields for
-- 24 h, typically 7 to 10: "w", "p" and the 5 buckets a commit increments
-- (then written with one HSET). Field "p" is the second at which stale
-- buckets (wholly before the window) are next pruned; the key's TTL is
-- window + jitter, renewed by every commit.
builders[2] = function()
  local SW_SIZE = { 1, 10, 60, 600, 3600, 86400 }
  local SW_NAME = { 's', 't', 'm', 'n', 'h', 'd' }
  local SW_LEVEL = { s = 1, t = 2, m = 3, n = 4, h = 5, d = 6 }

  local function swField(lvl, start) return SW_NAME[lvl] .. fmt(start / SW_SIZE[lvl]) end

  -- swRead fills bucket list b ({lvl, start} entries) with their values,
  -- reading only the 1 s buckets not already in c.sv (the cell's memo).
  local function swRead(c, b)
    local fields, idx = {}, {}
    for i = 1, #b do
      local v = nil
      if b[i][1] == 1 then v = c.sv[b[i][2]] end
      if v then
        b[i][3] = v
      else
        fields[#fields + 1] = swField(b[i][1], b[i][2])
        idx[#idx + 1] = i
      end
    end
    if #fields == 0 then return end
    local vals = redis.call('HMGET', c.key, unpack(fields))
    reads = reads + #fields
    for j = 1, #idx do
      local bk = b[idx[j]]
      bk[3] = tonumber(vals[j]) or 0
      if bk[1] == 1 then c.sv[bk[2]] = bk[3] end
    end
  end

  -- swSeconds makes sure c.sv holds the 1 s buckets from..to.
  local function swSeconds(c, from, to)
    local b = {}
    for s = from, to do b[#b + 1] = { 1, s } end
    swRead(c, b)
  end

  -- swWalk returns the window's buckets, oldest first, with values, and
  -- their sum (read once per check).
  local function swWalk(c)
    if c.b then return c.b, c.bsum end
    local b = {}
    local pos = c.s0
    for lvl = 1, c.nlev do
      local z = SW_SIZE[lvl]
      local zn = nil
      if lvl < c.nlev then zn = SW_SIZE[lvl + 1] end
      while pos <= c.sec and (zn == nil or pos % zn ~= 0) do
        b[#b + 1] = { lvl, pos }
        pos = pos + z
      end
      if pos > c.sec then break end
    end
    swRead(c, b)
    local sum = 0
    for i = 1, #b do sum = sum + b[i][3] end
    c.b, c.bsum = b, sum
    return b, sum
  end

  -- swChildren returns the buckets one level below bucket (lvl, start) that
  -- may hold calls (none after now's second), oldest first, with values.
  local function swChildren(c, lvl, start)
    local memo = c.kids[lvl .. ':' .. start]
    if memo then return memo end
    local z, zc = SW_SIZE[lvl], SW_SIZE[lvl - 1]
    local out = {}
    local p = start
    while p < start + z and p <= c.sec do
      out[#out + 1] = { lvl - 1, p }
      p = p + zc
    end
    swRead(c, out)
    c.kids[lvl .. ':' .. start] = out
    return out
  end

  -- swLast is the last second of bucket bk that can hold calls.
  local function swLast(c, bk)
    local last = bk[2] + SW_SIZE[bk[1]] - 1
    if last > c.sec then last = c.sec end
    return last
  end

  -- swKth returns the second of the x-th oldest call (x >= 1) in buckets b,
  -- or nil when b holds fewer than x calls.
  local function swKth(c, b, x)
    local cum = 0
    for i = 1, #b do
      local bk = b[i]
      if cum + bk[3] >= x then
        if bk[1] == 1 then return bk[2] end
        -- children that hold fewer calls than their parent (never after a
        -- consistent history): take the bucket's last second (a longer
        -- wait, never a shorter one)
        return swKth(c, swChildren(c, bk[1], bk[2]), x - cum) or swLast(c, bk)
      end
      cum = cum + bk[3]
    end
    return nil
  end

  -- swNewest returns the second of the newest call in buckets b, or nil.
  local function swNewest(c, b)
    for i = #b, 1, -1 do
      local bk = b[i]
      if bk[3] > 0 then
        if bk[1] == 1 then return bk[2] end
        return swNewest(c, swChildren(c, bk[1], bk[2])) or swLast(c, bk)
      end
    end
    return nil
  end

  -- swKthFrom returns the second of the x-th oldest call (1 <= x <= count):
  -- first from the 10 seconds after the oldest, else from a walk.
  local function swKthFrom(c, x)
    local to = c.old + 9
    if to > c.sec then to = c.sec end
    swSeconds(c, c.old, to)
    local cum = 0
    for s = c.old, to do
      cum = cum + c.sv[s]
      if cum >= x then return s end
    end
    return swKth(c, swWalk(c), x) or c.sec
  end

  local function swPrune(c)
    local fields = redis.call('HKEYS', c.key)
    local del = {}
    for _, f in ipairs(fields) do
      local lvl = SW_LEVEL[string.sub(f, 1, 1)]
      local idx = tonumber(string.sub(f, 2))
      if lvl and idx and (idx + 1) * SW_SIZE[lvl] - 1 < c.s0 then
        del[#del + 1] = f
        if #del == 1000 then
          redis.call('HDEL', c.key, unpack(del))
          del = {}
        end
      end
    end
    if #del > 0 then redis.call('HDEL', c.key, unpack(del)) end
    -- Next prune a quarter window later: stale fields stay under 1/4 of a window's worth.
    redis.call('HSET', c.key, 'p', fmt(c.sec + ceildiv(c.wsec, 4)))
  end

  local function swSetup(c)
    c.wsec = c.window / 1000
    c.sec = floor(now / 1000)
    c.s0 = c.sec - c.wsec + 1
    c.nlev = 5
    if c.wsec > 86400 then c.nlev = 6 end
    c.kids, c.sv, c.b = {}, {}, nil
  end

  local function swParseW(v)
    if not v then return nil end
    local i = string.find(v, ':', 1, true)
    local j = string.find(v, ':', i + 1, true)
    return tonumber(string.sub(v, 1, i - 1)), tonumber(string.sub(v, i + 1, j - 1)), tonumber(string.sub(v, j + 1))
  end

  local function swW(cur, cnt, old) return fmt(cur) .. ':' .. fmt(cnt) .. ':' .. fmt(old or -1) end

  return {
    peek = function(c)
      swSetup(c)
      -- "w", "p" and the buckets a commit would increment (HSET them in one go)
      local fields = { 'w', 'p' }
      c.curf = {}
      for lvl = 1, c.nlev do
        local z = SW_SIZE[lvl]
        c.curf[lvl] = swField(lvl, floor(c.sec / z) * z)
        fields[lvl + 2] = c.curf[lvl]
      end
      local v = redis.call('HMGET', c.key, unpack(fields))
      reads = reads + #fields
      c.curv = {}
      for lvl = 1, c.nlev do c.curv[lvl] = tonumber(v[lvl + 2]) or 0 end
      c.sv[c.sec] = c.curv[1]
      c.prune = tonumber(v[2])
      local cur, cnt, old = swParseW(v[1])
      c.wcur, c.wcnt, c.wold = cur, cnt, old
      c.back = cur ~= nil and c.s0 < cur
      local count, oldest = 0, nil
      if cur == nil or cnt <= 0 then
        count = 0 -- nothing counted in the last window
      elseif c.back then
        -- a clock behind the last commit's: recount ("w" only moves forward)
        local _, sum = swWalk(c)
        count = sum
      elseif old >= c.s0 then
        count, oldest = cnt, old
      elseif c.s0 - old <= 10 then
        -- the oldest calls left: take their seconds off, find the new oldest
        swSeconds(c, old, c.s0 - 1)
        count = cnt
        for s = old, c.s0 - 1 do count = count - c.sv[s] end
        if count > 0 then
          local to = c.s0 + 2
          if to > c.sec then to = c.sec end
          swSeconds(c, c.s0, to)
          for s = c.s0, to do
            if c.sv[s] > 0 then
              oldest = s
              break
            end
          end
        end
      else
        local _, sum = swWalk(c)
        count = sum
      end
      if count > 0 and oldest == nil then oldest = swKth(c, swWalk(c), 1) or c.sec end
      c.count, c.old = count, oldest
      if cur ~= nil and not c.back and (cur ~= c.s0 or cnt ~= count or old ~= (oldest or -1)) then
        redis.call('HSET', c.key, 'w', swW(c.s0, count, oldest))
      end
      return count + cost <= c.limit
    end,
    metrics = function(c, post)
      local cnt = c.count
      if post then cnt = cnt + cost end
      local function leave(s) return (s + c.wsec) * 1000 - now end
      local reset, retry = 0, 0
      if c.count > 0 then
        reset = leave(c.old)
      elseif cnt > 0 then
        reset = leave(c.sec) -- the call itself
      end
      if cost > c.limit then
        if post then
          retry = leave(c.sec)
        elseif cnt > 0 then
          retry = leave(swNewest(c, swWalk(c)) or c.sec)
        end
      elseif cnt + cost > c.limit then
        local x = cnt + cost - c.limit
        if x > c.count then
          retry = leave(c.sec) -- among the calls just counted
        else
          retry = leave(swKthFrom(c, x))
        end
      end
      return c.limit - cnt, reset, retry
    end,
    commit = function(c)
      local pruning = c.prune == nil or c.sec >= c.prune
      local set = {}
      if pruning and c.wcur == nil then
        -- a new key: nothing to recount or prune yet
        pruning = false
        set = { 'p', fmt(c.sec + ceildiv(c.wsec, 4)) }
      end
      if pruning and not c.back then
        -- recount from the buckets (before this call is in them)
        local b, sum = swWalk(c)
        c.count, c.old = sum, nil
        if sum > 0 then c.old = swKth(c, b, 1) or c.sec end
      end
      if pruning then swPrune(c) end
      local cur, cnt, old = c.s0, c.count + cost, c.old
      if c.count <= 0 then old = c.sec end
      if c.back then
        -- keep "w" where it was; it counts this call if it is not older
        cur, cnt, old = c.wcur, c.wcnt, c.wold
        if c.sec >= cur then
          if cnt <= 0 or c.sec < old then old = c.sec end
          cnt = cnt + cost
        end
      end
      -- one HSET: this call's bucket of every level, and "w"
      for lvl = 1, c.nlev do
        set[#set + 1] = c.curf[lvl]
        set[#set + 1] = fmt(c.curv[lvl] + cost)
      end
      set[#set + 1] = 'w'
      set[#set + 1] = swW(cur, cnt, old)
      redis.call('HSET', c.key, unpack(set))
      redis.call('PEXPIRE', c.key, fmt(c.window + c.jitter))
    end,
    refund = function(c)
      swSetup(c)
      for lvl = 1, c.nlev do
        local z = SW_SIZE[lvl]
        local f = swField(lvl, floor(c.sec / z) * z)
        if redis.call('HINCRBY', c.key, f, -cost) <= 0 then redis.call('HDEL', c.key, f) end
      end
      local cur, cnt, old = swParseW(redis.call('HGET', c.key, 'w'))
      if cur and c.sec >= cur then
        cnt = cnt - cost
        if cnt <= 0 then cnt, old = 0, -1 end
        redis.call('HSET', c.key, 'w', swW(cur, cnt, old))
      end
    end,
  }
end

---------------------------------------------------------------------------
-- 3 token_bucket: capacity = limit tokens, refilled continuously at limit
-- per window. Tokens are kept exactly as integers in units of 1/window_ms
-- of a token (so one ms refills `limit` units and a token is window_ms
-- units); the rules keep limit * window_ms <= 2^52 so every value is an
-- exact double. State "units:last_refill_ms" in one string key whose TTL is
-- the time to full (+ jitter): a missing key is a full bucket. Report (and
-- a shadow cell's count) may drive the bucket into debt, down to minus one
-- full bucket.
builders[3] = function()
  local function tbCharge(c)
    if cost >= 2 * c.limit then return -c.cap end
    local t = c.tokens - cost * c.window
    if t < -c.cap then t = -c.cap end
    return t
  end

  local function tbLoad(c)
    c.cap = c.limit * c.window
    local v = redis.call('GET', c.key)
    reads = reads + 1
    if not v then return false end
    local i = string.find(v, ':', 1, true)
    c.tokens = tonumber(string.sub(v, 1, i - 1))
    c.last = tonumber(string.sub(v, i + 1))
    if c.tokens > c.cap then c.tokens = c.cap end -- the limit was lowered
    return true
  end

  return {
    peek = function(c)
      if tbLoad(c) then
        if now > c.last then
          local need = c.cap - c.tokens
          if (now - c.last) * c.limit >= need then
            c.tokens = c.cap
          else
            c.tokens = c.tokens + (now - c.last) * c.limit
          end
          c.last = now
        end
      else
        c.tokens, c.last = c.cap, now
      end
      return cost <= c.limit and c.tokens >= cost * c.window
    end,
    metrics = function(c, post)
      local t = c.tokens
      if post then t = tbCharge(c) end
      local rem = 0
      if t > 0 then rem = floor(t / c.window) end
      local reset = ceildiv(c.cap - t, c.limit)
      local retry = reset -- a cost over the capacity never fits: time to full
      if cost <= c.limit then
        local need = cost * c.window - t
        retry = 0
        if need > 0 then retry = ceildiv(need, c.limit) end
      end
      return rem, reset, retry
    end,
    commit = function(c)
      local t = tbCharge(c)
      redis.call('SET', c.key, fmt(t) .. ':' .. fmt(c.last), 'PX', fmt(ceildiv(c.cap - t, c.limit) + c.jitter))
    end,
    refund = function(c)
      if not tbLoad(c) then return end
      local t = c.cap
      if cost < 2 * c.limit then t = c.tokens + cost * c.window end
      if t >= c.cap then
        redis.call('DEL', c.key)
      else
        redis.call('SET', c.key, fmt(t) .. ':' .. fmt(c.last), 'PX', fmt(ceildiv(c.cap - t, c.limit) + c.jitter))
      end
    end,
  }
end

---------------------------------------------------------------------------
-- 4 sliding_log: exact to the millisecond. A ring of the times of the last
-- `limit` counted calls (a call of cost c takes c slots), in one string:
-- an 8-byte header (head: next slot to write, which is the oldest once the
-- ring is full; capacity) and 6-byte big-endian millisecond times. The
-- string grows with use up to 8 + 6 * limit bytes. A call fits when fewer
-- than limit - cost + 1 of the ring's times are in (now - window, now].
-- Times never decrease along the ring: a call stamps max(now, newest), so
-- a server whose clock is behind counts its call a little longer. TTL: until
-- the newest time leaves the window (+ jitter).
builders[4] = function()
  local SL_HDR, SL_ES = 8, 6

  -- slLoad reads the ring into c. c.get(k) is the k-th oldest time (k from 0)
  -- of the c.n the current limit keeps (after a limit change, the newest).
  local function slLoad(c)
    local v = redis.call('GET', c.key)
    reads = reads + 1
    c.raw = v
    c.head, c.cap, c.rawn = 0, c.limit, 0
    if v then
      c.head, c.cap = struct.unpack('>I4I4', v)
      c.rawn = (#v - SL_HDR) / SL_ES
    end
    c.n = c.rawn
    if c.n > c.limit then c.n = c.limit end
    local drop = c.rawn - c.n
    c.get = function(k)
      local p = k + drop
      if c.rawn >= c.cap then p = (c.head + p) % c.cap end
      return (struct.unpack('>I6', v, SL_HDR + SL_ES * p + 1))
    end
  end

  -- slFirstAfter returns the first k in [0, n) with f(k) > t, or n.
  local function slFirstAfter(f, n, t)
    local lo, hi = 0, n
    while lo < hi do
      local mid = floor((lo + hi) / 2)
      if f(mid) > t then hi = mid else lo = mid + 1 end
    end
    return lo
  end

  return {
    peek = function(c)
      slLoad(c)
      c.ts = now
      if c.n > 0 then
        local newest = c.get(c.n - 1)
        if newest > now then c.ts = newest end
      end
      c.count = c.n - slFirstAfter(c.get, c.n, now - c.window)
      return cost <= c.limit and c.count + cost <= c.limit
    end,
    metrics = function(c, post)
      local f, n = c.get, c.n
      if post then
        local m = cost
        if m > c.limit then m = c.limit end
        local total = n + m
        if total > c.limit then total = c.limit end
        local d = n + m - total
        local get, ts, oldn = c.get, c.ts, c.n
        f = function(k)
          if k + d < oldn then return get(k + d) end
          return ts
        end
        n = total
      end
      local kw = slFirstAfter(f, n, now - c.window)
      local cnt = n - kw
      local reset, retry = 0, 0
      if cnt > 0 then reset = f(kw) + c.window - now end
      if cost > c.limit then
        if cnt > 0 then retry = f(n - 1) + c.window - now end
      elseif cnt + cost > c.limit then
        retry = f(kw + cnt + cost - c.limit - 1) + c.window - now
      end
      return c.limit - cnt, reset, retry
    end,
    commit = function(c)
      local L = c.limit
      local m = cost
      if m > L then m = L end
      local e = struct.pack('>I6', c.ts)
      local ttl = fmt(c.ts + c.window - now + c.jitter)
      if not c.raw or c.cap ~= L then
        -- new ring (or a limit change): write it whole
        local keep = c.n + m - L
        if keep < 0 then keep = 0 end
        local parts = {}
        for k = keep, c.n - 1 do parts[#parts + 1] = struct.pack('>I6', c.get(k)) end
        parts[#parts + 1] = string.rep(e, m)
        local total = c.n - keep + m
        redis.call('SET', c.key, struct.pack('>I4I4', total % L, L) .. table.concat(parts), 'PX', ttl)
        return
      end
      -- write m slots from head on (at most two runs), then the header
      local r1 = L - c.head
      if r1 > m then r1 = m end
      redis.call('SETRANGE', c.key, SL_HDR + SL_ES * c.head, string.rep(e, r1))
      if m > r1 then redis.call('SETRANGE', c.key, SL_HDR, string.rep(e, m - r1)) end
      redis.call('SETRANGE', c.key, 0, struct.pack('>I4I4', (c.head + m) % L, L))
      if c.rawn < L and c.rawn + m >= L then
        -- the ring just filled: SETRANGE grew the string with room to spare
        -- (up to twice its size); set it anew, at its exact size
        redis.call('SET', c.key, redis.call('GET', c.key), 'PX', ttl)
      else
        redis.call('PEXPIRE', c.key, ttl)
      end
    end,
    refund = function(c)
      slLoad(c)
      local L = c.limit
      if not c.raw or c.cap ~= L then return end
      local m = cost
      if m > L then m = L end
      -- the newest m times at or after now are this call's (best effort if
      -- another call was counted in between)
      local k = 0
      while k < m and k < c.n and c.get(c.n - 1 - k) >= now do k = k + 1 end
      if k == 0 then return end
      if c.rawn < L then
        local n = c.rawn - k
        if n == 0 then
          redis.call('DEL', c.key)
        else
          redis.call('SET', c.key, struct.pack('>I4I4', n, L) .. string.sub(c.raw, SL_HDR + 1, SL_HDR + SL_ES * n), 'KEEPTTL')
        end
      else
        -- full ring: the k newest slots become time 0 (long out of any
        -- window) and, moving the head back, the oldest.
        local zero = struct.pack('>I6', 0)
        local h = c.head - k
        if h >= 0 then
          redis.call('SETRANGE', c.key, SL_HDR + SL_ES * h, string.rep(zero, k))
        else
          redis.call('SETRANGE', c.key, SL_HDR, string.rep(zero, c.head))
          redis.call('SETRANGE', c.key, SL_HDR + SL_ES * (L + h), string.rep(zero, -h))
          h = L + h
        end
        redis.call('SETRANGE', c.key, 0, struct.pack('>I4I4', h, L))
      end
    end,
  }
end

---------------------------------------------------------------------------
-- 5 min_interval: interval = ceil(window / limit) ms (the rules keep
-- limit <= window_ms). State "next:prev": the earliest time the next call
-- may be counted, and the value before the last commit (for refund). A call
-- fits when now >= next (and cost <= limit); counting it moves next to
-- max(next, now) + cost * interval, at most limit * interval past now (so
-- report debt is at most one window). TTL: until next (+ jitter).
builders[5] = function()
  local function miCharge(c)
    local cap = now + c.limit * c.interval
    if cost >= c.limit then return cap end
    local base = now
    if c.next and c.next > now then base = c.next end
    local n = base + cost * c.interval
    if n > cap then n = cap end
    return n
  end

  local function miLoad(c)
    c.interval = ceildiv(c.window, c.limit)
    local v = redis.call('GET', c.key)
    reads = reads + 1
    c.next, c.prev = nil, nil
    if v then
      local i = string.find(v, ':', 1, true)
      c.next = tonumber(string.sub(v, 1, i - 1))
      c.prev = tonumber(string.sub(v, i + 1))
    end
  end

  local function miStore(c, n, prev)
    if n <= now then
      redis.call('DEL', c.key)
    else
      redis.call('SET', c.key, fmt(n) .. ':' .. fmt(prev), 'PX', fmt(n - now + c.jitter))
    end
  end

  return {
    peek = function(c)
      miLoad(c)
      return cost <= c.limit and (c.next == nil or now >= c.next)
    end,
    metrics = function(c, post)
      local nx = c.next
      if post then nx = miCharge(c) end
      local wait = 0
      if nx and nx > now then wait = nx - now end
      local rem = 0
      if wait == 0 then rem = 1 end
      return rem, wait, wait
    end,
    commit = function(c)
      miStore(c, miCharge(c), c.next or 0)
    end,
    refund = function(c)
      miLoad(c)
      if c.next == nil then return end
      local stored, prev = c.next, c.prev
      if prev == 0 then c.next = nil else c.next = prev end
      if miCharge(c) == stored then
        miStore(c, prev, 0) -- undo exactly
      else
        -- another call was counted in between: give back cost intervals
        local m = cost
        if m > c.limit then m = c.limit end
        miStore(c, stored - m * c.interval, prev)
      end
    end,
  }
end

---------------------------------------------------------------------------
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
    local h = dir_header(KEYS[n + j])
    local v = warm_get(h, ARGV[base + 1])
    reads = reads + 1
    if v then
      if v ~= 'H' then c.where = v end
    else
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
if debug then reply[#reply + 1] = reads end
return reply
