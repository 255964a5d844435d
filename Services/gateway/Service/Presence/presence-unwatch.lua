-- KEYS: the watched identity's watchers. ARGV: watcher, " <connId>". Removes the
-- watcher's entry only if that socket made it (a newer socket may have replaced it).
local value = redis.call('HGET', KEYS[1], ARGV[1])
if value and string.sub(value, -string.len(ARGV[2])) == ARGV[2] then
    return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
