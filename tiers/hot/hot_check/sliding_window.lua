-- hot_check/sliding_window.lua, algorithm 2 of hot_check.lua (preamble.lua: KEYS,
-- ARGV, reply). KEYS[i]: a hash of multi-level buckets, "w" and "p". ARGV: the cell's
-- limit, window_ms, ttl_jitter_ms, shadow (c.limit, c.window, c.jitter, c.shadow).
--
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
