-- lease_release.lua: delete move leases this worker still holds (a lease
-- that lapsed and was taken by another worker is left alone).
--
-- KEYS     the lease keys (prefix .. "mig:lease:" .. hex cell id)
-- ARGV[1]  the worker's token
--
-- Reply: per key 1 when the lease was deleted, 0 when it was not this
-- worker's.
local out = {}
for i, k in ipairs(KEYS) do
  if redis.call('GET', k) == ARGV[1] then
    out[i] = redis.call('DEL', k)
  else
    out[i] = 0
  end
end
return out
