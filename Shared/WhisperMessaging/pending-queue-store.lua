-- KEYS: queue, message key, presence key, the pair's bucket, byte count, the
-- recipient's peers, its strangers hash, its unanswered peers, its wrote set, its
-- message records' index of the day (all in the recipient's slot). ARGV: sender,
-- body, ttl ms, messageId, redeliver flag ('1', '0', or 'd' and a receipt's timestamp:
-- the recipient's `delivered` receipt came while the message was being stored, so a
-- new message is recorded as delivered and never queued), the bucket's capacity and refill per ms,
-- the queue's cap in messages and in bytes, the peers' cap and their expiry ms, 1 when
-- the sender is a stranger to the recipient (not a direct peer), and strangers' caps:
-- together in messages and in bytes, then each in messages and in bytes. For a group
-- copy also KEYS[11], the recipient's groups, and ARGV 17 and 18, the groupId and the
-- membership version the router checked the sender against. Returns
-- {'stored', entry, depth, presence, receipt} or {'duplicate', '', 0, presence, receipt},
-- where presence is the value of KEYS[3] as stored (false when none; for a duplicate,
-- unless the redeliver flag is set and it is still pending) and receipt the timestamp
-- of a `delivered` receipt recorded with the message (false when none; entry is then
-- ''), or {'limited', retry ms}, {'full'},
-- {'strangers'} (the strangers' share, or this stranger's, is taken), {'not_member'},
-- {'stale', version}, {'conflict'}. It publishes nothing.
-- A resend of a stored copy is answered as a duplicate even if the recipient has
-- left since (it was accepted before); a new copy is stored only while the
-- recipient's record names the group at the version checked.
--
-- Runs after rate-limit-buckets.lua and pending-queue-expiry.lua, whose functions it calls.
local record = redis.call('HMGET', KEYS[2], 'from', 'state', 'receipt')
if record[1] then
    if record[1] ~= ARGV[1] then return {'conflict'} end
    local socket = false
    if ARGV[5] == '1' and record[2] == 'pending' then
        socket = redis.call('GET', KEYS[3])
    end
    return {'duplicate', '', 0, socket, record[3]}
end
local receipt = string.match(ARGV[5], '^d(%-?%d+)$')
if ARGV[17] then
    local epoch = redis.call('HGET', KEYS[11], ARGV[17])
    if not epoch then return {'not_member'} end
    if epoch ~= ARGV[18] then return {'stale', epoch} end
end
local now = now_ms()
local length = expire_old(KEYS[1], KEYS[5], KEYS[7], tonumber(ARGV[3]), now)
local size = #ARGV[2]
local held = tonumber(redis.call('GET', KEYS[5]) or '0')
if length >= tonumber(ARGV[8]) or held + size > tonumber(ARGV[9]) then
    return {'full'}
end
-- Strangers together fill only their share of the queue, and each stranger a smaller
-- one, so that what is left always takes the recipient's direct peers' messages.
local stranger = ARGV[12] == '1'
if stranger then
    local counts = redis.call('HMGET', KEYS[7], 'n', 'b', 'n:' .. ARGV[1], 'b:' .. ARGV[1])
    if tonumber(counts[1] or '0') + 1 > tonumber(ARGV[13]) or tonumber(counts[2] or '0') + size > tonumber(ARGV[14])
        or tonumber(counts[3] or '0') + 1 > tonumber(ARGV[15]) or tonumber(counts[4] or '0') + size > tonumber(ARGV[16]) then
        return {'strangers'}
    end
end
local retry = take_token(KEYS[4], tonumber(ARGV[6]), tonumber(ARGV[7]), now)
if retry > 0 then return {'limited', retry} end
local id = ''
if receipt and not stranger then
    -- Delivered on arrival: only the record, in the state the acknowledgement script
    -- leaves a delivered message in (pending-queue-ack.lua), with the receipt's
    -- timestamp for a resend.
    redis.call('HSET', KEYS[2], 'from', ARGV[1], 'entry', '', 'state', 'delivered', 'size', size, 'receipt', receipt)
else
    receipt = false
    if stranger then
        id = redis.call('XADD', KEYS[1], '*', 'mid', ARGV[4], 'body', ARGV[2], 'st', ARGV[1])
        redis.call('HINCRBY', KEYS[7], 'n', 1)
        redis.call('HINCRBY', KEYS[7], 'b', size)
        redis.call('HINCRBY', KEYS[7], 'n:' .. ARGV[1], 1)
        redis.call('HINCRBY', KEYS[7], 'b:' .. ARGV[1], size)
        redis.call('PEXPIRE', KEYS[7], ARGV[3])
    else
        id = redis.call('XADD', KEYS[1], '*', 'mid', ARGV[4], 'body', ARGV[2])
    end
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    redis.call('INCRBY', KEYS[5], size)
    redis.call('PEXPIRE', KEYS[5], ARGV[3])
    redis.call('HSET', KEYS[2], 'from', ARGV[1], 'entry', id, 'state', 'pending', 'size', size)
    if stranger then redis.call('HSET', KEYS[2], 'stranger', '1') end
    length = length + 1
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
-- The day's index of the recipient's message records (their keys, in a list), what an
-- account deletion reads to find them: made with the day's first record, it lapses a
-- day after that record's lifetime.
if redis.call('RPUSH', KEYS[10], KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[10], tonumber(ARGV[3]) + 86400000) end
-- The sender joins the recipient's peers; one the recipient never wrote to is also
-- unanswered. Only a sender new to the set can take it past its cap, and then the
-- oldest unanswered sender leaves (the oldest of all only when every one was
-- answered): strangers push out strangers, never someone the recipient writes to.
local new_peer = redis.call('ZADD', KEYS[6], now, ARGV[1]) == 1
if redis.call('ZSCORE', KEYS[9], ARGV[1]) then
    redis.call('ZREM', KEYS[8], ARGV[1])
else
    redis.call('ZADD', KEYS[8], now, ARGV[1])
    redis.call('PEXPIRE', KEYS[8], ARGV[11])
end
if new_peer and redis.call('ZCARD', KEYS[6]) > tonumber(ARGV[10]) then
    local leaving = redis.call('ZRANGE', KEYS[8], 0, 0)[1] or redis.call('ZRANGE', KEYS[6], 0, 0)[1]
    redis.call('ZREM', KEYS[6], leaving)
    redis.call('ZREM', KEYS[8], leaving)
end
redis.call('PEXPIRE', KEYS[6], ARGV[11])
return {'stored', id, length, redis.call('GET', KEYS[3]), receipt}
