-- Deletes KEYS[1] only while it holds ARGV[1] (a lock, a pointer someone else may have replaced).
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
