import WhisperShared

/// The Lua scripts of `CallDesk`: each touches one hash slot (a call's keys, or one
/// identity's line), so the key space fits Redis Cluster.
extension CallDesk {
    /// KEYS: call. ARGV: caller, callee, media, offer frame, now, ttl ms, caller socket.
    /// Returns {'opened'}, {'existing', state} (the same parties) or {'conflict'}.
    static let openScript = RedisScript("""
        local found = redis.call('HMGET', KEYS[1], 'caller', 'callee', 'state')
        if found[3] then
            if found[1] ~= ARGV[1] or found[2] ~= ARGV[2] then return {'conflict'} end
            return {'existing', found[3]}
        end
        redis.call('HSET', KEYS[1], 'caller', ARGV[1], 'callee', ARGV[2], 'state', 'ringing', 'media', ARGV[3],
            'offer', ARGV[4], 'created', ARGV[5], 'callerSocket', ARGV[7])
        redis.call('PEXPIRE', KEYS[1], ARGV[6])
        return {'opened'}
        """)

    /// KEYS: line. ARGV: callId, ttl ms, a callId that may be replaced (or '').
    /// Returns '' when the line is now the call's, else the callId holding it.
    static let claimLineScript = RedisScript("""
        local held = redis.call('GET', KEYS[1])
        if held and held ~= ARGV[1] and held ~= ARGV[3] then return held end
        redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
        return ''
        """)

    /// KEYS: call. ARGV: action (`answer`, `end`, or `expire`: end only while ringing),
    /// now, by, reason, ttl ms, socket (answer). Returns {'missing'}, {'ended'},
    /// {'unchanged'} or {'done', previous state, created, reached}.
    static let transitionScript = RedisScript("""
        local state = redis.call('HGET', KEYS[1], 'state')
        if not state then return {'missing'} end
        if state == 'ended' then return {'ended'} end
        local action = ARGV[1]
        if (action == 'answer' or action == 'expire') and state ~= 'ringing' then return {'unchanged'} end
        local created = redis.call('HGET', KEYS[1], 'created') or '0'
        local reached = redis.call('HGET', KEYS[1], 'reached') or '0'
        if action == 'answer' then
            redis.call('HSET', KEYS[1], 'state', 'answered', 'answered', ARGV[2], 'calleeSocket', ARGV[6])
        else
            redis.call('HSET', KEYS[1], 'state', 'ended', 'ended', ARGV[2], 'by', ARGV[3], 'reason', ARGV[4])
            redis.call('HDEL', KEYS[1], 'offer')
        end
        redis.call('PEXPIRE', KEYS[1], ARGV[5])
        return {'done', state, created, reached}
        """)

    /// KEYS: the call's candidate list, the call. ARGV: frame, cap.
    static let bufferScript = RedisScript("""
        redis.call('RPUSH', KEYS[1], ARGV[1])
        redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
        local ttl = redis.call('PTTL', KEYS[2])
        if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) else redis.call('DEL', KEYS[1]) end
        return 1
        """)

    /// KEYS: ringing calls. ARGV: now, lease deadline, limit. Returns the due callIds,
    /// each pushed to the lease deadline.
    static let claimDueScript = RedisScript("""
        local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
        for _, callId in ipairs(due) do redis.call('ZADD', KEYS[1], 'XX', ARGV[2], callId) end
        return due
        """)
}
