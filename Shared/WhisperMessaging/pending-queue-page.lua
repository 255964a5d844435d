-- KEYS: queue, byte count, strangers hash. ARGV: start (exclusive "(id" or "-"), count, ttl ms.
--
-- Runs after rate-limit-buckets.lua and pending-queue-expiry.lua, whose functions it calls.
expire_old(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[3]), now_ms())
return redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', ARGV[2])
