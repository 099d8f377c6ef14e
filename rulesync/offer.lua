-- offer.lua: a starting instance offers the rules of its file. The file
-- wins unless the store has already had its version in force: an edited
-- file (a version never seen) is put in force for the whole fleet, while a
-- file the fleet has since replaced (an instance restarted with an old
-- copy) does not roll the fleet back. (seen.lua is loaded in front.)
--
-- KEYS[1]  the rules hash (prefix .. "rules")
-- ARGV     as put.lua: version, doc, by, at
--
-- Reply: {outcome, seq, seen_at}
--   'seeded'   the store was empty; the file is in force (seq 1)
--   'current'  the store has the file's version in force already
--   'new'      a version never seen: in force now (the new seq)
--   'stale'    a version the store had in force before: the store's stays
--              (seen_at: when that version was first in force, Unix ms)
--   'unknown'  the store predates remembering versions: its rules stay,
--              and from now on the versions in force are remembered
local key, version, at = KEYS[1], ARGV[1], ARGV[4]
local seq = redis.call('HGET', key, 'seq')
if not seq then
  redis.call('HSET', key, 'seq', 1, 'version', version, 'doc', ARGV[2], 'by', ARGV[3], 'at', at)
  remember(key, version, at)
  return {'seeded', 1, tonumber(at)}
end
local cur = redis.call('HGET', key, 'version') or ''
if cur == version then
  remember(key, version, at)
  return {'current', tonumber(seq), 0}
end
if redis.call('HEXISTS', key, 'seen:' .. cur) == 0 then
  remember(key, cur, redis.call('HGET', key, 'at') or at)
  return {'unknown', tonumber(seq), 0}
end
local seenAt = redis.call('HGET', key, 'seen:' .. version)
if seenAt then
  return {'stale', tonumber(seq), tonumber(seenAt) or 0}
end
local n = redis.call('HINCRBY', key, 'seq', 1)
redis.call('HSET', key, 'version', version, 'doc', ARGV[2], 'by', ARGV[3], 'at', at)
remember(key, version, at)
return {'new', n, tonumber(at)}
