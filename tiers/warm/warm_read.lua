-- warm_read.lua: read warm fields, after directory.lua (which locates each
-- in its tag's buckets).
--
-- KEYS     tags' headers (all in one hash slot)
-- ARGV     pairs: header index into KEYS (1-based), field
--
-- Reply: per pair the field's value, or false (absent).
local out = {}
for i = 1, #ARGV, 2 do
  out[#out + 1] = warm_get(dir_header_at(ARGV[i]), ARGV[i + 1])
end
return out
