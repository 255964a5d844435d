-- Functions for the scripts that charge a token bucket, which run after this text (no
-- KEYS or ARGV of its own): `now_ms()` reads the server's clock once (a
-- script that needs the time again passes it on); `take_tokens(key, capacity, rate,
-- now, wanted)` takes up to `wanted` tokens from the bucket `key` (a hash of `tokens`
-- and `ts`, refilled continuously at `rate` per ms, up to `capacity`) and returns how
-- many it took (as many as it holds, at most `wanted`) and, when it took none, the
-- milliseconds until it has one; `take_token(key, capacity, rate, now)` takes one
-- and returns 0, or that wait (nothing charged).
local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function take_tokens(key, capacity, rate, now, wanted)
    local state = redis.call('HMGET', key, 'tokens', 'ts')
    local tokens = tonumber(state[1])
    local ts = tonumber(state[2])
    if tokens == nil or ts == nil then
        tokens = capacity
        ts = now
    end
    tokens = math.min(capacity, tokens + math.max(0, now - ts) * rate)
    if tokens < 1 then return 0, math.ceil((1 - tokens) / rate) end
    local taken = math.min(wanted, math.floor(tokens))
    redis.call('HSET', key, 'tokens', string.format('%.6f', tokens - taken), 'ts', now)
    redis.call('PEXPIRE', key, math.ceil(capacity / rate) + 1000)
    return taken, 0
end

local function take_token(key, capacity, rate, now)
    local taken, retry = take_tokens(key, capacity, rate, now, 1)
    if taken == 0 then return retry end
    return 0
end

