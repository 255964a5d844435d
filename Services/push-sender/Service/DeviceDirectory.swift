import Logging
import PostgresNIO
import WhisperShared

/// The active device of an identity and its push tokens, read from Postgres for each
/// wake-up (a token changed by `update_tokens` is used from the next wake-up on).
struct DeviceDirectory: Sendable {
    let postgres: PostgresClient
    let logger: Logger

    struct Device: Sendable, Equatable {
        var platform: Platform
        var pushToken: String?
        var voipToken: String?
    }

    enum Platform: String, Sendable {
        case ios, android
    }

    /// Which of a device's tokens a push went to.
    enum TokenKind: Sendable {
        case push, voip
    }

    func activeDevice(of whisperId: String) async throws -> Device? {
        let rows = try await postgres.query(
            "SELECT platform, push_token, voip_token FROM devices WHERE whisper_id = \(whisperId) AND active",
            logger: logger
        )
        for try await (platform, push, voip) in rows.decode((String, String?, String?).self) {
            guard let platform = Platform(rawValue: platform) else { return nil }
            return Device(platform: platform, pushToken: push, voipToken: voip)
        }
        return nil
    }

    /// Forgets a token the provider called dead, only while it is still the one the
    /// push went to (the app may have sent a new one meanwhile). Returns whether it did.
    @discardableResult
    func removeToken(_ token: String, kind: TokenKind, of whisperId: String) async throws -> Bool {
        let rows: PostgresRowSequence
        switch kind {
        case .push:
            rows = try await postgres.query(
                """
                UPDATE devices SET push_token = NULL, updated_at = now()
                WHERE whisper_id = \(whisperId) AND active AND push_token = \(token) RETURNING device_id
                """,
                logger: logger
            )
        case .voip:
            rows = try await postgres.query(
                """
                UPDATE devices SET voip_token = NULL, updated_at = now()
                WHERE whisper_id = \(whisperId) AND active AND voip_token = \(token) RETURNING device_id
                """,
                logger: logger
            )
        }
        for try await _ in rows { return true }
        return false
    }
}
