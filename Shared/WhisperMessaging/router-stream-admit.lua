-- KEYS: the identity's shard of the stream, its bucket. ARGV: capacity, refill per ms, stream cap,
-- backlog limit (0: none), then the entry's fields and values. Routers delete what
-- they handled, so `XLEN` is the backlog. Returns {1, entry id}, {0, retry after ms}
-- or {2, 0} (busy).
--
-- Runs after rate-limit-buckets.lua, whose functions it calls.
local backlog = tonumber(ARGV[4])
if backlog > 0 and redis.call('XLEN', KEYS[1]) >= backlog then return {2, 0} end
local retry = take_token(KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2]), now_ms())
if retry > 0 then return {0, retry} end
return {1, redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', unpack(ARGV, 5))}
