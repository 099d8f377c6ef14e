-- write.lua: change one app's plan or one override and increment the
-- sequence every instance polls, atomically.
--
-- KEYS[1]  the assignments hash (prefix .. "appplans")
-- ARGV[1]  the field: "p:" .. app (its plan) or "o:" .. rule .. ":" .. app
--          (an override, as JSON)
-- ARGV[2]  the new value; '' deletes the field
--
-- Reply: the new sequence number.
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return redis.call('HINCRBY', KEYS[1], 'seq', 1)
