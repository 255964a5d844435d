-- KEYS: the owner's owed frames, the owner's deletion mark (RedisKeys.deleted).
-- ARGV: frame, ttl ms, capacity. Returns the entry's ID, or '' when the owner was deleted
-- (nothing kept).
if redis.call('EXISTS', KEYS[2]) == 1 then return '' end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[3], '*', 'f', ARGV[1])
-- Receipts older than the ttl go, though newer ones keep the stream alive.
local clock = redis.call('TIME')
local cutoff = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000) - tonumber(ARGV[2])
if cutoff > 0 then redis.call('XTRIM', KEYS[1], 'MINID', string.format('%d', cutoff)) end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return id
