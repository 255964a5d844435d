-- KEYS: ringing calls. ARGV: now, lease deadline, limit. Returns the due callIds,
-- each pushed to the lease deadline.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, callId in ipairs(due) do redis.call('ZADD', KEYS[1], 'XX', ARGV[2], callId) end
return due
