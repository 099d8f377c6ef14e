-- seed.lua: write the first rules only if the store is empty, so that
-- instances starting together agree on one file's rules.
--
-- KEYS[1]  the rules hash (prefix .. "rules")
-- ARGV     as put.lua
--
-- Reply: 1 when this call seeded the store, 0 when it held rules already.
-- (seen.lua is loaded in front.)
if redis.call('HEXISTS', KEYS[1], 'seq') == 1 then return 0 end
redis.call('HSET', KEYS[1], 'seq', 1, 'version', ARGV[1], 'doc', ARGV[2], 'by', ARGV[3], 'at', ARGV[4])
remember(KEYS[1], ARGV[1], ARGV[4])
return 1
