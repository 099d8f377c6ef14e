-- lease_take.lua: take the move leases of cells that no worker holds.
--
-- KEYS     the lease keys (prefix .. "mig:lease:" .. hex cell id); on a
--          Redis Cluster one key a call (they carry no hash tag)
-- ARGV[1]  the worker's token
-- ARGV[2]  the lease's time to live, in milliseconds
--
-- Reply: per key 1 when the lease is now this worker's, 0 when another
-- worker holds it.
local out = {}
for i, k in ipairs(KEYS) do
  if redis.call('SET', k, ARGV[1], 'NX', 'PX', ARGV[2]) then out[i] = 1 else out[i] = 0 end
end
return out
