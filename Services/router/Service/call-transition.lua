-- KEYS: call. ARGV: action (`answer`, `end`, or `expire`: end only while ringing),
-- now, by, reason, ttl ms, socket (answer). Returns {'missing'}, {'ended'},
-- {'unchanged'} or {'done', previous state, created, reached}.
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'missing'} end
if state == 'ended' then return {'ended'} end
local action = ARGV[1]
if (action == 'answer' or action == 'expire') and state ~= 'ringing' then return {'unchanged'} end
local created = redis.call('HGET', KEYS[1], 'created') or '0'
local reached = redis.call('HGET', KEYS[1], 'reached') or '0'
if action == 'answer' then
    redis.call('HSET', KEYS[1], 'state', 'answered', 'answered', ARGV[2], 'calleeSocket', ARGV[6])
else
    redis.call('HSET', KEYS[1], 'state', 'ended', 'ended', ARGV[2], 'by', ARGV[3], 'reason', ARGV[4])
    redis.call('HDEL', KEYS[1], 'offer')
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return {'done', state, created, reached}
