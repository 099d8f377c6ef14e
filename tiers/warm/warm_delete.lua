-- warm_delete.lua: delete warm fields whatever they hold, after
-- directory.lua.
--
-- KEYS     tags' headers (all in one hash slot)
-- ARGV     pairs: header index into KEYS (1-based), field
--
-- Reply: 1.
for i = 1, #ARGV, 2 do
  warm_del(dir_header_at(ARGV[i]), ARGV[i + 1])
end
return 1
