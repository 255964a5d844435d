-- KEYS: the bucket. ARGV: capacity, refill per ms, tokens wanted. Returns
-- {granted, 0} (granted >= 1) or {0, retry after ms}.
--
-- Runs after rate-limit-buckets.lua, whose functions it calls.
local granted, retry = take_tokens(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), now_ms(), tonumber(ARGV[3]))
return {granted, retry}
