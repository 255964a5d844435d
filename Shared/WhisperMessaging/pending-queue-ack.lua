-- KEYS: queue, message key, byte count, strangers hash. ARGV: 1 when delivered (else read), and 1 to
-- only ask (`checkReceipt`: nothing is written). Returns the sender when the receipt
-- is to be passed on, else "". `delivered` takes the message out of the queue.
--
-- The receipt-state rule lives here and nowhere else: a `delivered` receipt counts
-- while its message is pending, a `read` receipt once. (A `delivered` receipt that
-- rides in its message's store is a new message's first: pending-queue-store.lua
-- records the message as this script leaves a delivered one.)
--
-- Runs after pending-queue-expiry.lua, whose `release_stranger` it calls.
local message = redis.call('HMGET', KEYS[2], 'from', 'state', 'entry', 'size', 'read', 'stranger')
local from = message[1]
if not from then return '' end
local counts
if ARGV[1] == '1' then counts = (message[2] == 'pending') else counts = not message[5] end
if not counts then return '' end
if ARGV[2] == '1' then return from end
if ARGV[1] == '1' then
    if redis.call('XDEL', KEYS[1], message[3]) == 1 and message[4] then
        redis.call('DECRBY', KEYS[3], tonumber(message[4]))
        if message[6] then release_stranger(KEYS[4], from, tonumber(message[4])) end
    end
    if redis.call('XLEN', KEYS[1]) == 0 then redis.call('DEL', KEYS[3], KEYS[4]) end
    redis.call('HSET', KEYS[2], 'state', 'delivered')
    return from
end
redis.call('HSET', KEYS[2], 'read', '1')
return from
