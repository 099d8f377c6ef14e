-- cold_replace.lua: replace a tag's cold filter with one built anew
-- (migrate.Worker.CompactColdFilters), after directory.lua, if no cell of
-- the tag was switched into cold since the builder read the filter's
-- version: every switch changes it (cold_switch.lua), so a cell switched
-- meanwhile, which the new filter may lack, makes this call do nothing.
-- The header's warm layout (bytes 1-4) is kept as it is now.
--
-- KEYS[1]  the tag's header
-- ARGV[1]  the filter's version (4 bytes) the new filter was built after
-- ARGV[2]  the new filter: the cells in its last layer (4 bytes), its layer
--          count (1 byte), 4 bytes a layer (its size in blocks), then the
--          layers (directory.lua's header from byte 9 on)
--
-- Reply: 1 replaced (the version is then the next one), 0 the version had
-- changed (nothing written).
local head = redis.call('GETRANGE', KEYS[1], 0, DIR_HEADER - 1)
if #head < DIR_HEADER then head = head .. string.rep('\0', DIR_HEADER - #head) end
if string.sub(head, 5, 8) ~= ARGV[1] then return 0 end
local version = dir_u32s((dir_u32(head, 5) + 1) % 4294967296)
redis.call('SET', KEYS[1], string.sub(head, 1, 4) .. version .. ARGV[2])
return 1
