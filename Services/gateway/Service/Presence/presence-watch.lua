-- KEYS: the watched identity's watchers, its presence. ARGV: watcher, entry value,
-- now (ms), the cap on watchers, the hash's expiry (ms). Makes room by dropping
-- expired entries when at the cap. Returns {recorded 1|0, online 1|0}.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then
    local all = redis.call('HGETALL', KEYS[1])
    for i = 1, #all, 2 do
        local expires = tonumber(string.match(all[i + 1], '^(%d+)'))
        if not expires or expires <= tonumber(ARGV[3]) then redis.call('HDEL', KEYS[1], all[i]) end
    end
    if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then
        return {0, redis.call('EXISTS', KEYS[2])}
    end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return {1, redis.call('EXISTS', KEYS[2])}
