-- lease_renew.lua: extend move leases this worker still holds, so a batch
-- that runs long keeps its cells.
--
-- KEYS     the lease keys (prefix .. "mig:lease:" .. hex cell id)
-- ARGV[1]  the worker's token
-- ARGV[2]  the new time to live, in milliseconds
--
-- Reply: per key 1 when the lease was extended, 0 when it was not this
-- worker's.
local out = {}
for i, k in ipairs(KEYS) do
  if redis.call('GET', k) == ARGV[1] then
    out[i] = redis.call('PEXPIRE', k, ARGV[2])
  else
    out[i] = 0
  end
end
return out
