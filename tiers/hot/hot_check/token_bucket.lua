-- hot_check/token_bucket.lua, algorithm 3 of hot_check.lua (preamble.lua: KEYS,
-- ARGV, reply). KEYS[i]: a string "units:last_refill_ms" (none: full). ARGV: the cell's
-- limit, window_ms, ttl_jitter_ms, shadow (c.limit, c.window, c.jitter, c.shadow).
--
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
