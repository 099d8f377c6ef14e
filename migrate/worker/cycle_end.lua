-- cycle_end.lua: delete the fleet's running-cycle key if it still names
-- the cycle that ended (a newer cycle's key is left alone).
--
-- KEYS[1]  the cycle key (prefix .. "mig:cycle")
-- ARGV[1]  the id of the cycle that ended
--
-- Reply: 1 when the key was deleted, 0 otherwise.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
