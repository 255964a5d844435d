-- Renews a presence entry only while it still names this socket.
-- KEYS[1]: the identity's presence key. ARGV[1]: this socket's record (`<gateway> <connId>`),
-- ARGV[2]: the expiry in ms. Returns 1 when renewed, 0 when another socket holds the
-- entry or it is gone.
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
