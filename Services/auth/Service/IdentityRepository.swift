import Foundation
import Logging
import NIOCore
import PostgresNIO
import WhisperShared

/// An identity as stored: its Whisper ID, public keys and standing.
struct Identity: Sendable, Equatable {
    var whisperId: String
    var encPublicKey: [UInt8]
    var signPublicKey: [UInt8]
    var banned: Bool
}

/// Identities and devices in Postgres.
struct IdentityRepository: Sendable {
    let postgres: PostgresClient
    let logger: Logger
    /// Device rows kept per identity (`AuthSettings.devicesKeptPerIdentity`).
    var devicesKept = AuthSettings.defaultDevicesKept

    /// A ban is in force when the user row says so or an unlifted, unexpired ban exists.
    private static let columns = """
        u.whisper_id, u.enc_public_key, u.sign_public_key,
        (u.status = 'banned' OR EXISTS (
            SELECT 1 FROM bans b WHERE b.whisper_id = u.whisper_id AND b.lifted_at IS NULL
              AND (b.expires_at IS NULL OR b.expires_at > now()))) AS banned
        """

    func find(whisperId: String) async throws -> Identity? {
        let rows = try await postgres.query(
            "SELECT \(unescaped: Self.columns) FROM users u WHERE u.whisper_id = \(whisperId)", logger: logger
        )
        return try await Self.first(rows)
    }

    func find(signPublicKey: [UInt8]) async throws -> Identity? {
        let rows = try await postgres.query(
            "SELECT \(unescaped: Self.columns) FROM users u WHERE u.sign_public_key = \(ByteBuffer(bytes: signPublicKey))", logger: logger
        )
        return try await Self.first(rows)
    }

    /// Whether a ban is in force now (read afresh, for the check after a session was made).
    func isBanned(_ whisperId: String) async throws -> Bool {
        try await find(whisperId: whisperId)?.banned ?? false
    }

    private static func first(_ rows: PostgresRowSequence) async throws -> Identity? {
        for try await (id, enc, sign, banned) in rows.decode((String, ByteBuffer, ByteBuffer, Bool).self) {
            return Identity(whisperId: id, encPublicKey: Array(enc.readableBytesView), signPublicKey: Array(sign.readableBytesView), banned: banned)
        }
        return nil
    }

    /// Creates an identity under a fresh Whisper ID, trying again on the (rare) collision,
    /// with a live identity or a deleted one (a Whisper ID is never given out twice).
    /// When the signing key was registered concurrently, returns that identity instead.
    func create(encPublicKey: [UInt8], signPublicKey: [UInt8]) async throws -> Identity {
        for _ in 0..<8 {
            let whisperId = WhisperID.generate()
            let inserted = try await postgres.query(
                """
                INSERT INTO users (whisper_id, enc_public_key, sign_public_key)
                SELECT \(whisperId), \(ByteBuffer(bytes: encPublicKey)), \(ByteBuffer(bytes: signPublicKey))
                WHERE NOT EXISTS (SELECT 1 FROM deleted_identities WHERE whisper_id = \(whisperId))
                ON CONFLICT DO NOTHING
                RETURNING whisper_id
                """,
                logger: logger
            ).decode(String.self).first { _ in true }
            if inserted != nil {
                return Identity(whisperId: whisperId, encPublicKey: encPublicKey, signPublicKey: signPublicKey, banned: false)
            }
            if let existing = try await find(signPublicKey: signPublicKey) {
                return existing
            }
        }
        throw WhisperError(.internalError, "could not allocate a Whisper ID")
    }

    /// Makes `deviceId` the identity's one active device, with its platform and tokens.
    /// Sign-ins of one identity take turns (the identity's row is locked first): two at
    /// once would otherwise each miss the other's new device and collide on the index
    /// that allows one active device per identity.
    /// Makes `deviceId` the identity's one active device. A device ID already
    /// registered to another identity is never taken over: nothing changes and the
    /// answer is false (the caller refuses the registration).
    func activateDevice(_ deviceId: String, whisperId: String, platform: Platform, pushToken: String?, voipToken: String?) async throws -> Bool {
        try await postgres.withTransaction(logger: logger) { connection in
            _ = try await connection.query("SELECT 1 FROM users WHERE whisper_id = \(whisperId) FOR UPDATE", logger: logger)
            // The device row, locked: when it is another identity's, nothing is changed.
            let owners = try await connection.query("SELECT whisper_id FROM devices WHERE device_id = \(deviceId)::uuid FOR UPDATE", logger: logger)
            for try await owner in owners.decode(String.self) where owner != whisperId {
                return false
            }
            // The other devices: no longer active, and with no tokens (nothing is pushed
            // to them); only the most recent `devicesKept - 1` of them stay at all, so
            // sign-ins from new installs cannot grow an identity's rows without bound.
            _ = try await connection.query(
                """
                UPDATE devices SET active = false, push_token = NULL, voip_token = NULL, updated_at = now()
                WHERE whisper_id = \(whisperId) AND device_id <> \(deviceId)::uuid
                  AND (active OR push_token IS NOT NULL OR voip_token IS NOT NULL)
                """,
                logger: logger
            )
            _ = try await connection.query(
                """
                DELETE FROM devices WHERE whisper_id = \(whisperId) AND device_id <> \(deviceId)::uuid AND device_id NOT IN (
                    SELECT device_id FROM devices WHERE whisper_id = \(whisperId) AND device_id <> \(deviceId)::uuid
                    ORDER BY last_seen_at DESC, updated_at DESC LIMIT \(devicesKept - 1)
                )
                """,
                logger: logger
            )
            _ = try await connection.query(
                """
                INSERT INTO devices (device_id, whisper_id, platform, push_token, voip_token, active)
                VALUES (\(deviceId)::uuid, \(whisperId), \(platform.rawValue), \(pushToken), \(voipToken), true)
                ON CONFLICT (device_id) DO UPDATE SET
                    platform = EXCLUDED.platform,
                    push_token = EXCLUDED.push_token, voip_token = EXCLUDED.voip_token,
                    active = true, updated_at = now(), last_seen_at = now()
                WHERE devices.whisper_id = EXCLUDED.whisper_id
                """,
                logger: logger
            )
            return true
        }
    }

    /// Applies a token change to the session's device; false when the device is gone.
    func updateTokens(deviceId: String, whisperId: String, push: TokenUpdate, voip: TokenUpdate) async throws -> Bool {
        func value(_ update: TokenUpdate) -> (keep: Bool, token: String?) {
            switch update {
            case .unchanged: (true, nil)
            case .clear: (false, nil)
            case .set(let token): (false, token)
            }
        }
        let (keepPush, pushToken) = value(push)
        let (keepVoip, voipToken) = value(voip)
        let updated = try await postgres.query(
            """
            UPDATE devices SET
                push_token = CASE WHEN \(keepPush) THEN push_token ELSE \(pushToken) END,
                voip_token = CASE WHEN \(keepVoip) THEN voip_token ELSE \(voipToken) END,
                updated_at = now()
            WHERE device_id = \(deviceId)::uuid AND whisper_id = \(whisperId)
            RETURNING device_id
            """,
            logger: logger
        ).decode(UUID.self).first { _ in true }
        return updated != nil
    }
}
