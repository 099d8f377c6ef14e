-- put.lua: write new rules in force and increment the sequence every
-- instance polls, atomically.
--
-- KEYS[1]  the rules hash (prefix .. "rules")
-- ARGV[1]  the rules' version, ARGV[2] the rules as JSON,
-- ARGV[3]  the writing instance, ARGV[4] the time (Unix ms)
--
-- Reply: the new sequence number.
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'doc', ARGV[2], 'by', ARGV[3], 'at', ARGV[4])
return seq
