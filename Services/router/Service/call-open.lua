-- KEYS: call. ARGV: caller, callee, media, offer frame, now, ttl ms, caller socket.
-- Returns {'opened'}, {'existing', state} (the same parties) or {'conflict'}.
local found = redis.call('HMGET', KEYS[1], 'caller', 'callee', 'state')
if found[3] then
    if found[1] ~= ARGV[1] or found[2] ~= ARGV[2] then return {'conflict'} end
    return {'existing', found[3]}
end
redis.call('HSET', KEYS[1], 'caller', ARGV[1], 'callee', ARGV[2], 'state', 'ringing', 'media', ARGV[3],
    'offer', ARGV[4], 'created', ARGV[5], 'callerSocket', ARGV[7])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return {'opened'}
