-- KEYS: the sender's wrote set, the sender's unanswered set (both in the sender's
-- slot). ARGV: the recipient, the wrote set's cap, its expiry ms. Records that the
-- sender wrote to the recipient: the recipient joins the sender's wrote set (the
-- newest ARGV[2] kept) and leaves its unanswered set, so that strangers filling the
-- sender's peers set never push the recipient out of it. Returns nothing.
--
-- Runs after rate-limit-buckets.lua, whose now_ms it calls.
local now = now_ms()
if redis.call('ZADD', KEYS[1], now, ARGV[1]) == 1 and redis.call('ZCARD', KEYS[1]) > tonumber(ARGV[2]) then
    redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -(tonumber(ARGV[2]) + 1))
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('ZREM', KEYS[2], ARGV[1])
return false
