import Foundation
import Logging
import PostgresNIO
import WhisperShared

/// The console's list of identities: newest first, a page at a time, all of them or those
/// whose ID starts with (`WSP-…`) or holds what the operator typed. A start reads the
/// index `users_whisper_id_pattern`; a piece from inside an ID reads identities newest
/// first until a page is full (at most the whole table for a piece nobody's ID holds).
struct UserSearch: Sendable {
    static let pageSize = 50

    /// The `LIKE` pattern, nil for everyone.
    let pattern: String?
    /// Where the previous page ended: its last identity's creation (µs) and ID.
    let after: (micros: Int64, whisperId: String)?

    struct Row: Sendable {
        var whisperId: String
        var createdAt: Int64
        var banned: Bool
        var activeDevices: Int64
        var lastSeen: Int64?
    }

    /// Nil when `typed` cannot be part of a Whisper ID (only A to Z, 2 to 7 and dashes,
    /// uppercased; at most 40 characters): no pattern is built from anything else.
    init?(typed: String, cursor: String?) {
        guard typed.utf8.count <= 40, typed.unicodeScalars.allSatisfy({ ("A"..."Z").contains($0) || ("2"..."7").contains($0) || $0 == "-" }) else {
            return nil
        }
        pattern = typed.isEmpty ? nil : typed.hasPrefix("WSP-") ? typed + "%" : "%" + typed + "%"
        after = cursor.flatMap(Self.position)
    }

    /// `<µs>.<Whisper ID>`, as `page` hands it out; anything else starts from the newest.
    static func position(_ cursor: String) -> (micros: Int64, whisperId: String)? {
        let parts = cursor.split(separator: ".", maxSplits: 1).map(String.init)
        guard parts.count == 2, let micros = Int64(parts[0]), micros >= 0, Format.isWhisperID(parts[1]) else { return nil }
        return (micros, parts[1])
    }

    /// One page, and the cursor of the next when there is more.
    func page(on postgres: PostgresClient, logger: Logger) async throws -> ([Row], String?) {
        let afterMicros = after?.micros, afterId = after?.whisperId
        let rows = try await postgres.query("""
            SELECT u.whisper_id, (extract(epoch FROM u.created_at) * 1000000)::bigint,
                   EXISTS (SELECT 1 FROM bans b WHERE b.whisper_id = u.whisper_id AND b.lifted_at IS NULL
                           AND (b.expires_at IS NULL OR b.expires_at > now())),
                   (SELECT count(*) FROM devices d WHERE d.whisper_id = u.whisper_id AND d.active),
                   (SELECT (extract(epoch FROM max(d.last_seen_at)) * 1000)::bigint FROM devices d WHERE d.whisper_id = u.whisper_id)
            FROM users u
            WHERE (\(pattern)::text IS NULL OR u.whisper_id LIKE \(pattern))
              AND (\(afterMicros)::bigint IS NULL
                   OR (u.created_at, u.whisper_id) < ('epoch'::timestamptz + \(afterMicros) * interval '1 microsecond', \(afterId)::text))
            ORDER BY u.created_at DESC, u.whisper_id DESC LIMIT \(Self.pageSize + 1)
            """, logger: logger)
        var found: [(Row, Int64)] = []
        for try await (whisperId, micros, banned, devices, lastSeen) in rows.decode((String, Int64, Bool, Int64, Int64?).self) {
            found.append((Row(whisperId: whisperId, createdAt: micros / 1_000, banned: banned, activeDevices: devices, lastSeen: lastSeen), micros))
        }
        guard found.count > Self.pageSize else { return (found.map(\.0), nil) }
        let last = found[Self.pageSize - 1]
        return (found.prefix(Self.pageSize).map(\.0), "\(last.1).\(last.0.whisperId)")
    }
}
