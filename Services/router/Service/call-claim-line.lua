-- KEYS: line. ARGV: callId, ttl ms, a callId that may be replaced (or '').
-- Returns '' when the line is now the call's, else the callId holding it.
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] and held ~= ARGV[3] then return held end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ''
