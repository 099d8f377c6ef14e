-- lease_release.lua: delete move leases this worker still holds (a lease
-- that lapsed and was taken by another worker is left alone).
--
-- KEYS     the lease keys (prefix .. "mig:lease:" .. hex cell id), each
--          once (a worker holds a cell's lease once)
-- ARGV[1]  the worker's token
--
-- Reply: per key 1 when the lease was deleted, 0 when it was not this
-- worker's.
--
-- One MGET and one DEL a call, not a GET and a DEL a key: each redis.call
-- costs Redis about as much as the MGET of a few keys.
local held = redis.call('MGET', unpack(KEYS))
local out, mine = {}, {}
for i = 1, #KEYS do
  if held[i] == ARGV[1] then
    mine[#mine + 1] = KEYS[i]
    out[i] = 1
  else
    out[i] = 0
  end
end
if #mine > 0 then redis.call('DEL', unpack(mine)) end
return out
