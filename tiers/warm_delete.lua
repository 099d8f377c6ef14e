-- warm_delete.lua: delete warm fields whatever they hold, after
-- directory.lua.
--
-- KEYS[1]  the tag's header
-- ARGV     fields
--
-- Reply: 1.
local h = dir_header(KEYS[1])
for i = 1, #ARGV do warm_del(h, ARGV[i]) end
return 1
