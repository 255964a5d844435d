import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import PostgresNIO
import WhisperShared

/// The encrypted contacts backup (docs/protocol.md section 12, "Contacts backup"): one blob per identity, sealed on the device
/// with a key derived from the seed phrase; the server stores and returns it, and
/// cannot read it. Only the session's own identity's blob is ever touched.
struct ContactsBackupRoutes: Sendable {
    let postgres: PostgresClient
    let sessions: SessionStore
    let limiter: RateLimiter
    let rules: LimitRules
    let logger: Logger

    /// The largest sealed blob (ciphertext bytes once decoded): some thousands of contacts.
    static let maxCiphertextBytes = Limits.MAX_CONTACTS_BACKUP_BYTES

    struct Upload: Decodable {
        var nonce: String
        var ciphertext: String
        var cryptoVersion: Int
        var protocolVersion: Int
    }

    func register(on router: Router<ClientRequestContext>) {
        router.put("/backup/contacts") { request, _ -> Response in
            let session = try await admit(request)
            let body = try await request.body.collect(upTo: Self.maxCiphertextBytes * 4 / 3 + 4_096)
            let upload = try Self.checked(body)
            let size = Format.decodedLength(ofBase64: upload.ciphertext)
            let rows = try await postgres.query("""
                INSERT INTO contact_backups (whisper_id, nonce_b64, ciphertext_b64, updated_at, size_bytes)
                VALUES (\(session.whisperId), \(upload.nonce), \(upload.ciphertext), now(), \(size))
                ON CONFLICT (whisper_id) DO UPDATE
                SET nonce_b64 = EXCLUDED.nonce_b64, ciphertext_b64 = EXCLUDED.ciphertext_b64, updated_at = now(), size_bytes = EXCLUDED.size_bytes
                RETURNING (extract(epoch FROM updated_at) * 1000)::bigint
                """, logger: logger)
            var updatedAt: Int64 = 0
            for try await value in rows.decode(Int64.self) { updatedAt = value }
            logger.info("contacts_backup_stored", metadata: ["whisperId": "\(session.whisperId)", "sizeBytes": "\(size)"])
            return try JSONResponse.make(["success": true, "updatedAt": updatedAt])
        }
        router.get("/backup/contacts") { request, _ -> Response in
            let session = try await admit(request)
            let rows = try await postgres.query("""
                SELECT nonce_b64, ciphertext_b64, (extract(epoch FROM updated_at) * 1000)::bigint
                FROM contact_backups WHERE whisper_id = \(session.whisperId)
                """, logger: logger)
            for try await (nonce, ciphertext, updatedAt) in rows.decode((String, String, Int64).self) {
                return try JSONResponse.make(["nonce": nonce, "ciphertext": ciphertext, "updatedAt": updatedAt])
            }
            throw WhisperHTTPError(.notFound, "no contacts backup for this identity")
        }
        router.delete("/backup/contacts") { request, _ -> Response in
            let session = try await admit(request)
            try await postgres.query("DELETE FROM contact_backups WHERE whisper_id = \(session.whisperId)", logger: logger)
            return try JSONResponse.make(["success": true])
        }
    }

    private func admit(_ request: Request) async throws -> SessionRecord {
        let session = try await sessions.authenticate(request)
        try await limiter.chargeRequest(.backupPerIdentity, key: session.whisperId, rules: rules)
        return session
    }

    static func checked(_ body: ByteBuffer) throws -> Upload {
        guard let object = try? JSONSerialization.jsonObject(with: Data(buffer: body)) as? [String: Any] else {
            throw WhisperHTTPError(.invalidPayload, "the body must be a JSON object {nonce, ciphertext, cryptoVersion, protocolVersion}")
        }
        let known: Set<String> = ["nonce", "ciphertext", "cryptoVersion", "protocolVersion"]
        if let unknown = object.keys.first(where: { !known.contains($0) }) {
            throw WhisperHTTPError(.invalidPayload, "\(unknown) is not a field of a contacts backup")
        }
        guard let upload = try? JSONDecoder().decode(Upload.self, from: Data(buffer: body)) else {
            throw WhisperHTTPError(.invalidPayload, "nonce and ciphertext must be strings, the versions integers")
        }
        guard Limits.SUPPORTED_PROTOCOL_VERSIONS.contains(upload.protocolVersion) else {
            throw WhisperHTTPError(.invalidPayload, "protocolVersion \(upload.protocolVersion) is not supported")
        }
        guard Limits.CONTACTS_BACKUP_CRYPTO_VERSIONS.contains(upload.cryptoVersion) else {
            throw WhisperHTTPError(
                .invalidPayload,
                "cryptoVersion \(upload.cryptoVersion) is not a contacts backup version; supported: \(Limits.CONTACTS_BACKUP_CRYPTO_VERSIONS.sorted())"
            )
        }
        guard Format.isBase64(upload.nonce, decodedLength: 24) else {
            throw WhisperHTTPError(.invalidPayload, "nonce must be base64 of exactly 24 bytes")
        }
        guard Format.isBase64(upload.ciphertext), Format.decodedLength(ofBase64: upload.ciphertext) >= 16 else {
            throw WhisperHTTPError(.invalidPayload, "ciphertext must be the base64 of a secretbox (at least 16 bytes)")
        }
        guard Format.decodedLength(ofBase64: upload.ciphertext) <= maxCiphertextBytes else {
            throw WhisperHTTPError(.invalidPayload, "ciphertext is over \(maxCiphertextBytes) bytes")
        }
        return upload
    }
}
