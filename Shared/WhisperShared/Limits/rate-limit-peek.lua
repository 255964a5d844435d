-- KEYS: the bucket. ARGV: capacity, refill per ms. Returns {1, 0} when the bucket holds
-- a token, else {0, ms until it does}. Writes nothing: for limits charged only when
-- the attempt turns out to fail (a wrong guess), and checked before it.
--
-- Runs after rate-limit-buckets.lua, whose `now_ms` it calls.
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens, ts = tonumber(state[1]), tonumber(state[2])
if tokens == nil or ts == nil then return {1, 0} end
local capacity, rate = tonumber(ARGV[1]), tonumber(ARGV[2])
tokens = math.min(capacity, tokens + math.max(0, now_ms() - ts) * rate)
if tokens >= 1 then return {1, 0} end
return {0, math.ceil((1 - tokens) / rate)}
