-- KEYS: the identity's watchers, its bucket of presence events. ARGV: the bucket's
-- capacity and refill per ms, now (ms). Returns {2} when nobody watches (nothing
-- charged), {0} when the bucket is empty, else {1, record, ...}: the watching socket's
-- presence record of every live subscription, as stored (expired ones are dropped).
--
-- Runs after rate-limit-buckets.lua, whose functions it calls.
local all = redis.call('HGETALL', KEYS[1])
if #all == 0 then return {2} end
local now = tonumber(ARGV[3])
if take_token(KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2]), now_ms()) > 0 then return {0} end
local out = {1}
for i = 1, #all, 2 do
    local expires, record = string.match(all[i + 1], '^(%d+) (.+)$')
    if expires and tonumber(expires) > now then
        out[#out + 1] = record
    else
        redis.call('HDEL', KEYS[1], all[i])
    end
end
return out
