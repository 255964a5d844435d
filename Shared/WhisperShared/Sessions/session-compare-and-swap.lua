-- Sets KEYS[1] to ARGV[2] only while it still holds ARGV[1].
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
    return 1
end
return 0
