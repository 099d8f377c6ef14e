-- lease_renew.lua: extend a move lease only if this worker still holds it,
-- so a batch that runs long keeps its cells.
--
-- KEYS[1]  the lease key (prefix .. "mig:lease:" .. hex cell id)
-- ARGV[1]  the worker's token
-- ARGV[2]  the new time to live, in milliseconds
--
-- Reply: 1 when the lease was extended, 0 when it was not this worker's.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
