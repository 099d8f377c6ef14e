-- lease_release.lua: delete a move lease only if this worker still holds it
-- (a lease that lapsed and was taken by another worker is left alone).
--
-- KEYS[1]  the lease key (prefix .. "mig:lease:" .. hex cell id)
-- ARGV[1]  the worker's token
--
-- Reply: 1 when the lease was deleted, 0 when it was not this worker's.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
