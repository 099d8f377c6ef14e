-- put.lua: write new rules in force and increment the sequence every
-- instance polls, atomically.
--
-- KEYS[1]  the rules hash (prefix .. "rules")
-- ARGV[1]  the rules' version, ARGV[2] the rules as JSON,
-- ARGV[3]  the writing instance, ARGV[4] the time (Unix ms)
--
-- Reply: the new sequence number. (seen.lua is loaded in front.)
-- The version replaced is remembered too (a store written before versions
-- were remembered): an old file never rolls back what a PUT replaced.
local old = redis.call('HGET', KEYS[1], 'version')
if old then remember(KEYS[1], old, redis.call('HGET', KEYS[1], 'at') or ARGV[4]) end
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'doc', ARGV[2], 'by', ARGV[3], 'at', ARGV[4])
remember(KEYS[1], ARGV[1], ARGV[4])
return seq
