-- KEYS: the sender's peers, the pair's throttle. ARGV: the peer, the interval (ms).
-- Returns 0 (throttled) or when the peer last wrote to the sender ('' for never).
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then return 0 end
return redis.call('ZSCORE', KEYS[1], ARGV[1]) or ''
