-- KEYS: the call's candidate list, the call. ARGV: frame, cap.
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
local ttl = redis.call('PTTL', KEYS[2])
if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) else redis.call('DEL', KEYS[1]) end
return 1
