-- What expiry, acknowledgement and the store share.
--
-- A stranger's message (its sender and the recipient are not direct peers) is counted
-- in the recipient's strangers hash, in the queue's slot: `n` and `b` for strangers
-- together, `n:<sender>` and `b:<sender>` for each; the stream entry names its sender
-- (`st`) and the message key says `stranger`. `release_stranger` takes one message of
-- `size` bytes off the counts when it leaves the queue.
local function release_stranger(strangers, sender, size)
    if redis.call('HINCRBY', strangers, 'n:' .. sender, -1) <= 0 then
        redis.call('HDEL', strangers, 'n:' .. sender, 'b:' .. sender)
    else
        redis.call('HINCRBY', strangers, 'b:' .. sender, -size)
    end
    if redis.call('HINCRBY', strangers, 'n', -1) <= 0 then
        redis.call('DEL', strangers)
    else
        redis.call('HINCRBY', strangers, 'b', -size)
    end
end

-- Removes what is older than the TTL, a bounded batch per call, and takes its size
-- off the byte count (KEYS[1] the queue, `bytes` its count key, `strangers` its
-- strangers hash); returns how many messages the queue still holds. An empty queue's
-- counts are deleted, which also heals counts left by an earlier version.
local function expire_old(queue, bytes, strangers, ttl, now)
    local old = redis.call('XRANGE', queue, '-', '(' .. tostring(now - ttl), 'COUNT', 256)
    local freed = 0
    for _, entry in ipairs(old) do
        local fields = entry[2]
        local size, sender = 0, nil
        for i = 1, #fields, 2 do
            if fields[i] == 'body' then size = #fields[i + 1] end
            if fields[i] == 'st' then sender = fields[i + 1] end
        end
        freed = freed + size
        if sender then release_stranger(strangers, sender, size) end
        redis.call('XDEL', queue, entry[1])
    end
    local length = redis.call('XLEN', queue)
    if length == 0 then
        redis.call('DEL', bytes, strangers)
    elseif freed > 0 then
        redis.call('DECRBY', bytes, freed)
    end
    return length
end
