-- hot_check/min_interval.lua, algorithm 5 of hot_check.lua (preamble.lua: KEYS,
-- ARGV, reply). KEYS[i]: a string "next:prev". ARGV: the cell's
-- limit, window_ms, ttl_jitter_ms, shadow (c.limit, c.window, c.jitter, c.shadow).
--
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
