import Foundation
import Logging
import WhisperShared

/// Challenges, registration and recovery, and the session frames (docs/protocol.md section 4).
struct Registration: Sendable {
    let redis: RedisClient
    let identities: IdentityRepository
    let sessions: SessionStore
    let presence: PresenceStore
    let limiter: RateLimiter
    let settings: AuthSettings
    let metrics: ServiceMetrics
    let logger: Logger

    /// What a challenge remembers about who asked for it.
    struct StoredChallenge: Codable {
        var challenge: String
        var deviceId: String
        var platform: Platform
        var whisperId: String?
    }

    func begin(_ request: RegisterBegin, context: ConnectionContext) async throws -> RegisterChallenge {
        // Per address only: an identity's own bucket is charged once its proof verifies,
        // so naming someone's Whisper ID here costs them nothing.
        try await limitRegistration(context: context)
        let challengeId = RandomID.uuid()
        let challenge = Data(SecureBytes.random(32)).base64EncodedString()
        let stored = StoredChallenge(challenge: challenge, deviceId: request.deviceId.lowercased(), platform: request.platform, whisperId: request.whisperId)
        let ttl = Limits.CHALLENGE_TTL_SECONDS * 1000
        try await redis.send("SET", RedisKeys.challenge(challengeId), Array(try JSONEncoder().encode(stored)), "PX", ttl)
        return RegisterChallenge(challengeId: challengeId, challenge: challenge, expiresAt: Clock.millisecondsNow() + Int64(ttl))
    }

    func proof(_ request: RegisterProof, context: ConnectionContext) async throws -> RegisterAck {
        try await limitRegistration(context: context)
        // Single use: the challenge is gone after this read, whatever happens next.
        guard let bytes = try await redis.send("GETDEL", RedisKeys.challenge(request.challengeId.lowercased())).bytes,
              let stored = try? JSONDecoder().decode(StoredChallenge.self, from: Data(bytes)) else {
            throw refuse(.authFailed, "challenge unknown, expired or already used", outcome: "bad_challenge")
        }
        guard stored.deviceId == request.deviceId.lowercased(), stored.platform == request.platform,
              stored.whisperId == nil || stored.whisperId == request.whisperId else {
            throw refuse(.authFailed, "challenge was issued for another device or identity", outcome: "bad_challenge")
        }
        let challengeBytes = [UInt8](Data(base64Encoded: stored.challenge) ?? Data())
        let signPublicKey = [UInt8](Data(base64Encoded: request.signPublicKey) ?? Data())
        let encPublicKey = [UInt8](Data(base64Encoded: request.encPublicKey) ?? Data())
        let signature = [UInt8](Data(base64Encoded: request.signature) ?? Data())
        let signed = RegistrationProof.signedBytes(challenge: challengeBytes, cryptoVersion: request.cryptoVersion)
        guard Ed25519.verifyWithSodium(signature: signature, message: signed, publicKey: signPublicKey) else {
            throw refuse(.authFailed, "signature does not verify", outcome: "bad_signature")
        }

        let identity: Identity
        var created = false
        if let whisperId = request.whisperId {
            guard let existing = try await identities.find(whisperId: whisperId),
                  existing.signPublicKey == signPublicKey, existing.encPublicKey == encPublicKey else {
                throw refuse(.authFailed, "keys do not match this Whisper ID", outcome: "key_mismatch")
            }
            identity = existing
        } else if let existing = try await identities.find(signPublicKey: signPublicKey) {
            guard existing.encPublicKey == encPublicKey else {
                throw refuse(.authFailed, "keys do not match the identity of this signing key", outcome: "key_mismatch")
            }
            identity = existing
        } else {
            // `create` returns the identity a concurrent registration made for this signing key, if any.
            identity = try await identities.create(encPublicKey: encPublicKey, signPublicKey: signPublicKey)
            guard identity.encPublicKey == encPublicKey else {
                throw refuse(.authFailed, "keys do not match the identity of this signing key", outcome: "key_mismatch")
            }
            created = true
        }
        // Only now, with a proof only the identity's key holder can make, is the
        // identity's own bucket charged: naming a Whisper ID costs its owner nothing.
        try await limitIdentity(identity.whisperId)
        guard !identity.banned else {
            throw refuse(.userBanned, "this identity is banned", outcome: "banned")
        }

        guard try await identities.activateDevice(
            request.deviceId.lowercased(), whisperId: identity.whisperId, platform: request.platform,
            pushToken: request.pushToken, voipToken: request.voipToken
        ) else {
            throw refuse(.forbidden, "this deviceId is registered to another identity; a new install makes a new deviceId", outcome: "device_taken")
        }
        let now = Clock.millisecondsNow()
        let record = SessionRecord(
            whisperId: identity.whisperId, deviceId: request.deviceId.lowercased(), platform: request.platform,
            createdAt: now, expiresAt: now + Int64(SessionStore.ttl.milliseconds)
        )
        let previousSocket = try await presence.lookup(identity.whisperId)
        let (token, replaced) = try await sessions.create(for: record)
        // A ban that committed after the check above has ended sessions already, maybe
        // before this one existed: look again now that it does.
        if try await identities.isBanned(identity.whisperId) {
            try await sessions.revokeAll(of: identity.whisperId)
            throw refuse(.userBanned, "this identity is banned", outcome: "banned")
        }
        // Single active device: the earlier device's socket, wherever it is, is told and closed.
        if let previousSocket, previousSocket != PresenceRecord(gateway: context.gateway, connId: context.connId) {
            try await GatewayCommand(kind: .revoke, connId: previousSocket.connId, reason: .replacedByNewDevice)
                .publish(to: previousSocket.gateway, on: redis)
        }
        metrics.counter("registrations", help: "Successful registrations, by kind.", labels: [("kind", created ? "new" : "recovery")]).increment()
        logger.info("registered", metadata: [
            "whisperId": "\(identity.whisperId)", "deviceId": "\(record.deviceId)", "connId": "\(context.connId)",
            "kind": "\(created ? "new" : "recovery")", "replacedSession": "\(replaced)",
        ])
        return RegisterAck(whisperId: identity.whisperId, sessionToken: token, sessionExpiresAt: record.expiresAt, serverTime: now)
    }

    func refresh(_ request: SessionRefresh, context: ConnectionContext) async throws -> SessionRefreshed {
        let now = Clock.millisecondsNow()
        guard let (token, record) = try await sessions.refresh(request.sessionToken, now: now),
              context.whisperId == nil || context.whisperId == record.whisperId else {
            throw WhisperError(.notRegistered, "no valid session for this connection; register first")
        }
        return SessionRefreshed(sessionToken: token, sessionExpiresAt: record.expiresAt, serverTime: now)
    }

    func logout(_ request: Logout, context: ConnectionContext) async throws -> LoggedOut {
        guard let record = try await sessions.lookup(request.sessionToken),
              context.whisperId == nil || context.whisperId == record.whisperId else {
            throw WhisperError(.notRegistered, "no valid session for this connection; register first")
        }
        try await sessions.revoke(request.sessionToken)
        logger.info("logged_out", metadata: ["whisperId": "\(record.whisperId)", "connId": "\(context.connId)"])
        return LoggedOut()
    }

    func updateTokens(_ request: UpdateTokens, context: ConnectionContext) async throws -> TokensUpdated {
        guard let record = try await sessions.lookup(request.sessionToken),
              context.whisperId == nil || context.whisperId == record.whisperId else {
            throw WhisperError(.notRegistered, "no valid session for this connection; register first")
        }
        try await limiter.charge(.updateTokensPerAddress, key: RateLimiter.addressKey(context.remoteAddress ?? "unknown"), rules: settings.limits)
        try await limiter.charge(.updateTokensPerIdentity, key: record.whisperId, rules: settings.limits)
        guard try await identities.updateTokens(deviceId: record.deviceId, whisperId: record.whisperId, push: request.pushToken, voip: request.voipToken) else {
            throw WhisperError(.notRegistered, "this device is no longer registered")
        }
        return TokensUpdated()
    }

    private func limitRegistration(context: ConnectionContext) async throws {
        let limit = Limit.registerPerAddress
        if case .limited(let retry) = try await limiter.take(limit, key: RateLimiter.addressKey(context.remoteAddress ?? "unknown"), rules: settings.limits) {
            throw refuse(.rateLimited, limit.refusal(retryAfterMs: retry), outcome: "rate_limited")
        }
    }

    private func limitIdentity(_ key: String) async throws {
        let limit = Limit.registerPerIdentity
        if case .limited(let retry) = try await limiter.take(limit, key: key, rules: settings.limits) {
            throw refuse(.rateLimited, limit.refusal(retryAfterMs: retry), outcome: "rate_limited")
        }
    }

    private func refuse(_ code: ErrorCode, _ message: String, outcome: String) -> WhisperError {
        metrics.counter("registrations_refused", help: "Refused registration attempts, by reason.", labels: [("reason", outcome)]).increment()
        return WhisperError(code, message)
    }
}
