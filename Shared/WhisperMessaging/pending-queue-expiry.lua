-- Removes what is older than the TTL, a bounded batch per call, and takes its size
-- off the byte count (KEYS[1] the queue, `bytes` its count key); returns how many
-- messages the queue still holds. An empty queue's count is set to 0, which also
-- heals a count left by an earlier version.
local function expire_old(queue, bytes, ttl, now)
    local old = redis.call('XRANGE', queue, '-', '(' .. tostring(now - ttl), 'COUNT', 256)
    local freed = 0
    for _, entry in ipairs(old) do
        local fields = entry[2]
        for i = 1, #fields, 2 do
            if fields[i] == 'body' then freed = freed + #fields[i + 1] end
        end
        redis.call('XDEL', queue, entry[1])
    end
    local length = redis.call('XLEN', queue)
    if length == 0 then
        redis.call('DEL', bytes)
    elseif freed > 0 then
        redis.call('DECRBY', bytes, freed)
    end
    return length
end

