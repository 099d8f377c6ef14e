-- hot_check/sliding_log.lua, algorithm 4 of hot_check.lua (preamble.lua: KEYS,
-- ARGV, reply). KEYS[i]: a string, a header and a ring of 6-byte times. ARGV: the cell's
-- limit, window_ms, ttl_jitter_ms, shadow (c.limit, c.window, c.jitter, c.shadow).
--
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
