-- KEYS: the bucket. ARGV: capacity, refill per ms.
--
-- Runs after rate-limit-buckets.lua, whose functions it calls.
local retry = take_token(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), now_ms())
if retry > 0 then return {0, retry} end
return {1, 0}
