-- hot_check/preamble.lua: the head of hot_check.lua, the script that decides
-- one limit check against its hot-tier cells and, when
-- the mode and the decision say so, count it - all in one atomic step.
--
-- KEYS[i]  the Redis key of cell i (one key per cell; all in one hash slot)
-- ARGV[1]  now, milliseconds since the Unix epoch (the caller's clock, so tests drive time)
-- ARGV[2]  cost, an integer >= 1
-- ARGV[3]  mode: 0 enforce (count only if every non-shadow cell allows),
--          1 dry run (count nothing), 2 report (count unconditionally),
--          3 refund (give back a cost counted earlier at the same `now`)
-- ARGV[4 + 5*(i-1) ...]  per cell i: algorithm, limit, window_ms, ttl_jitter_ms, shadow (0|1)
--          algorithm: 1 fixed_window, 2 sliding_window, 3 token_bucket,
--          4 sliding_log, 5 min_interval
--
-- Reply: for each cell, 4 integers: allowed (0|1), remaining, reset_after_ms,
-- retry_after_ms; then 1 integer: 1 if the cost was counted, else 0.
-- remaining, reset_after_ms and retry_after_ms describe the state after the
-- call when it is counted (or, in a dry run, would be), else the state now;
-- retry_after_ms is 0 when the cell allows. In refund mode the reply
-- describes each cell after the refund, as for a call that was not counted.
--
-- Directory (mode +16, fixed_window cells only; package tiers, router.go
-- and coldfilter.go): a cell with a directory entry whose own key does not
-- exist is looked up in its warm bucket field. No field: the cell is hot
-- (new, or its key expired) unless its tag's cold filter says it may be
-- cold and the router has not found it not cold at the filter's current
-- version. 'H' (older versions): hot. 'M' (being moved) or anything else
-- (the cell's warm record): elsewhere. A cell not hot is neither peeked
-- nor counted, and its 4 reply values are -1 (warm) | -2 (moving) | -4
-- (may be cold: the router asks MySQL), then for -1 the raw record and for
-- -4 the filter version (strings), then 0s. The other (hot) cells are
-- decided and counted as if they were the whole check; the router decides
-- the rest in warm/cold and refunds this part if the whole check is
-- denied. A hot key that exists costs no lookup: a key exists only while
-- its cell is hot (a move out of hot renames it away in the same step
-- that writes 'M').
--
-- The Go reference models in internal/testsupport/tiermodel have the same integer semantics; the
-- differential test holds the two together.

local now = tonumber(ARGV[1])
local cost = tonumber(ARGV[2])
local mode = tonumber(ARGV[3])
-- +16 directory: the last ARGV is d, the number of directory entries; the
-- last d KEYS are the cells' tags' headers (directory.lua), and after the
-- cells' ARGV come d triples (cell index, field, version at which the
-- router found the cell not cold or ''). See "Directory" above.
local ndir = 0
if mode >= 16 then
  mode = mode - 16
  ndir = tonumber(ARGV[#ARGV])
end
local STRIDE = 5

local floor = math.floor

-- fmt writes an integer-valued number exactly (tostring would switch to
-- exponent notation past 14 digits).
local function fmt(x) return string.format('%.0f', x) end

-- ceildiv(a, b) = ceil(a / b) for integers 0 <= a <= 2^53, b >= 1. floor of
-- the double quotient is exact below 2^53.
local function ceildiv(a, b)
  local q = floor(a / b)
  if q * b < a then q = q + 1 end
  return q
end

-- Each algorithm has:
--   peek(c)          read the cell's state into c, return whether a call of
--                    `cost` fits (counts nothing; sliding_window may write
--                    back its running count, which changes no answer)
--   metrics(c, post) remaining, reset_ms, retry_ms of the state after the
--                    call is counted (post) or of the state now; retry is
--                    for another call of `cost` (no writes; may read)
--   commit(c)        count the call
--   refund(c)        give back a call of `cost` counted at `now`
--
-- builders[code]() makes an algorithm's functions: only the algorithms a
-- check uses are built (defining them all costs every call its time).
local builders = {}
