-- warm_read.lua: read warm fields, after directory.lua (which locates each
-- in its tag's buckets).
--
-- KEYS[1]  the tag's header
-- ARGV     fields
--
-- Reply: per field its value, or false (absent).
local h = dir_header(KEYS[1])
local out = {}
for i = 1, #ARGV do out[i] = warm_get(h, ARGV[i]) end
return out
