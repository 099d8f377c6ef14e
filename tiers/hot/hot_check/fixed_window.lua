-- hot_check/fixed_window.lua, algorithm 1 of hot_check.lua (preamble.lua: KEYS,
-- ARGV, reply). KEYS[i]: a string, the count of the window its key names. ARGV: the cell's
-- limit, window_ms, ttl_jitter_ms, shadow (c.limit, c.window, c.jitter, c.shadow).
--
-- 1 fixed_window: the key (which includes the window index) holds the count.
builders[1] = function()
  return {
    peek = function(c)
      c.used = tonumber(redis.call('GET', c.key) or '0')
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
