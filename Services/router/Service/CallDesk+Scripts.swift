import WhisperShared

/// The Lua scripts of `CallDesk`: each touches one hash slot (a call's keys, or one
/// identity's line), so the key space fits Redis Cluster.
extension CallDesk {
    /// `call-open.lua` (its header says what it takes and answers).
    static let openScript = RedisScript(LuaSource.callOpen)

    /// `call-claim-line.lua` (its header says what it takes and answers).
    static let claimLineScript = RedisScript(LuaSource.callClaimLine)

    /// `call-transition.lua` (its header says what it takes and answers).
    static let transitionScript = RedisScript(LuaSource.callTransition)

    /// `call-buffer.lua` (its header says what it takes and answers).
    static let bufferScript = RedisScript(LuaSource.callBuffer)

    /// `call-claim-due.lua` (its header says what it takes and answers).
    static let claimDueScript = RedisScript(LuaSource.callClaimDue)
}
