import Foundation
import Hummingbird
import Logging
import PostgresNIO
import WhisperShared

/// Bans and reports (docs/protocol.md section 12, "Admin API"). A ban is recorded in Postgres with its audit row in one
/// transaction, then enforced through Redis (`BanEnforcement`): sessions end, live
/// sockets close on every gateway, routers drop what they cached.
struct Moderation: Sendable {
    let auth: AdminAuth
    let postgres: PostgresClient
    let enforcement: BanEnforcement
    let logger: Logger

    /// A ban lasts at most this long when it has an end (ten years); without one it
    /// lasts until lifted.
    static let maxBanSeconds: Int64 = 10 * 365 * 86_400
    static let reasonCharacters = 1...500
    static let noteCharacters = 0...1_000

    struct BanRequest: Decodable {
        var whisperId: String
        var reason: String
        var expiresAt: Int64?
        var durationSeconds: Int64?
        static let fields: Set<String> = ["whisperId", "reason", "expiresAt", "durationSeconds"]
        static let describe = "{whisperId, reason, expiresAt? (ms) or durationSeconds?}"
    }

    struct UnbanRequest: Decodable {
        var whisperId: String
        var note: String?
        static let fields: Set<String> = ["whisperId", "note"]
        static let describe = "{whisperId, note?}"
    }

    struct ReviewRequest: Decodable {
        var decision: String
        var note: String?
        static let fields: Set<String> = ["decision", "note"]
        static let describe = "{decision: \"dismissed\"|\"actioned\", note?}"
    }

    /// The columns a ban is shown with (`Ban.init(row:)` reads them in this order).
    static let banColumns = """
        b.id, b.whisper_id, b.reason, b.banned_by, (extract(epoch FROM b.created_at) * 1000)::bigint,
        (extract(epoch FROM b.expires_at) * 1000)::bigint, (extract(epoch FROM b.lifted_at) * 1000)::bigint, b.lifted_by
        """

    typealias BanRow = (Int64, String, String, String, Int64, Int64?, Int64?, String?)

    static func ban(_ row: BanRow, now: Int64) -> [String: Any] {
        let (id, whisperId, reason, bannedBy, createdAt, expiresAt, liftedAt, liftedBy) = row
        let state = liftedAt != nil ? "lifted" : (expiresAt.map { $0 <= now } ?? false) ? "expired" : "active"
        return [
            "id": String(id), "whisperId": whisperId, "reason": reason, "bannedBy": bannedBy, "createdAt": createdAt,
            "expiresAt": expiresAt.map { $0 as Any } ?? NSNull(), "liftedAt": liftedAt.map { $0 as Any } ?? NSNull(),
            "liftedBy": liftedBy.map { $0 as Any } ?? NSNull(), "state": state,
        ]
    }

    // MARK: Bans

    func registerBans(on router: Router<ClientRequestContext>) {
        router.post("/admin/ban") { request, _ -> Response in
            let actor = try auth.operator(of: request)
            let body = try await AdminBody.decode(BanRequest.self, from: request, fields: BanRequest.fields, describe: BanRequest.describe)
            let (whisperId, reason, expiresAt) = try Self.checked(body, now: Clock.millisecondsNow())
            return try await ban(whisperId, reason: reason, expiresAt: expiresAt, by: actor)
        }
        router.post("/admin/unban") { request, _ -> Response in
            let actor = try auth.operator(of: request)
            let body = try await AdminBody.decode(UnbanRequest.self, from: request, fields: UnbanRequest.fields, describe: UnbanRequest.describe)
            guard Format.isWhisperID(body.whisperId) else { throw WhisperHTTPError(.invalidPayload, "whisperId must be a Whisper ID (WSP-XXXX-XXXX-XXXX)") }
            let note = try body.note.map { try AdminBody.text($0, "note", characters: Self.noteCharacters) }
            return try await unban(body.whisperId, note: note, by: actor)
        }
        router.get("/admin/bans") { request, _ -> Response in
            _ = try auth.operator(of: request)
            return try await listBans(request)
        }
    }

    static func checked(_ body: BanRequest, now: Int64) throws -> (String, String, Int64?) {
        guard Format.isWhisperID(body.whisperId) else {
            throw WhisperHTTPError(.invalidPayload, "whisperId must be a Whisper ID (WSP-XXXX-XXXX-XXXX)")
        }
        let reason = try AdminBody.text(body.reason, "reason", characters: reasonCharacters)
        guard reason.contains(where: { !$0.isWhitespace }) else { throw WhisperHTTPError(.invalidPayload, "reason must not be blank") }
        var expiresAt: Int64?
        switch (body.expiresAt, body.durationSeconds) {
        case (.some, .some):
            throw WhisperHTTPError(.invalidPayload, "give expiresAt or durationSeconds, not both")
        case (.some(let at), nil):
            guard at > now, at - now <= maxBanSeconds * 1_000 else {
                throw WhisperHTTPError(.invalidPayload, "expiresAt must be in the future, at most ten years ahead (ms since 1970)")
            }
            expiresAt = at
        case (nil, .some(let seconds)):
            guard (1...maxBanSeconds).contains(seconds) else {
                throw WhisperHTTPError(.invalidPayload, "durationSeconds must be 1 to \(maxBanSeconds)")
            }
            expiresAt = now + seconds * 1_000
        case (nil, nil):
            expiresAt = nil
        }
        return (body.whisperId, reason, expiresAt)
    }

    /// Records the ban (replacing one in force, which is kept as lifted history) and
    /// its audit row together, then enforces it. Repeating a ban repeats the
    /// enforcement, so a ban whose enforcement failed (503) is completed by sending it again.
    func ban(_ whisperId: String, reason: String, expiresAt: Int64?, by actor: String) async throws -> Response {
        let (ban, endedSession) = try await performBan(whisperId, reason: reason, expiresAt: expiresAt, by: actor)
        return try JSONResponse.make(["success": true, "ban": ban, "endedSession": endedSession])
    }

    /// The ban as the API shows it, and whether a live session ended.
    func performBan(_ whisperId: String, reason: String, expiresAt: Int64?, by actor: String) async throws -> ([String: Any], Bool) {
        let now = Clock.millisecondsNow()
        let row: BanRow = try await postgres.adminTransaction(logger: logger) { connection in
            // One ban change per identity at a time.
            let exists = try await connection.query(
                "SELECT 1 FROM users WHERE whisper_id = \(whisperId) FOR UPDATE", logger: logger
            ).decode(Int.self).first { _ in true }
            guard exists != nil else { throw WhisperHTTPError(.notFound, "no such identity") }
            // A ban that ran out stays as history, closed by its expiry.
            try await connection.query("""
                UPDATE bans SET lifted_at = expires_at, lifted_by = 'expiry'
                WHERE whisper_id = \(whisperId) AND lifted_at IS NULL AND expires_at IS NOT NULL AND expires_at <= now()
                """, logger: logger)
            let replaced = try await connection.query("""
                UPDATE bans SET lifted_at = now(), lifted_by = \(actor)
                WHERE whisper_id = \(whisperId) AND lifted_at IS NULL RETURNING id
                """, logger: logger).decode(Int64.self).first { _ in true }
            let expires = expiresAt.map { Double($0) / 1_000 }
            let rows = try await connection.query("""
                INSERT INTO bans AS b (whisper_id, reason, banned_by, expires_at)
                VALUES (\(whisperId), \(reason), \(actor), to_timestamp(\(expires)))
                RETURNING \(unescaped: Self.banColumns)
                """, logger: logger)
            guard let row = try await rows.decode(BanRow.self).first(where: { _ in true }) else {
                throw WhisperHTTPError(.internalError, "the ban was not recorded")
            }
            var details = ["reason": reason]
            if let expiresAt { details["expiresAt"] = String(expiresAt) }
            if let replaced { details["replacedBan"] = String(replaced) }
            try await AuditLog.record(on: connection, actor: actor, action: "ban", target: whisperId, details: details, logger: logger)
            return row
        }
        let outcome: BanEnforcement.Outcome
        do {
            outcome = try await enforcement.ban(whisperId)
        } catch {
            logger.error("ban_enforcement_failed", metadata: ["whisperId": "\(whisperId)", "error": "\(error)"])
            throw WhisperHTTPError(
                .internalError, "the ban is recorded, but its sessions could not be ended yet (Redis); send the same request again",
                headers: [.retryAfter: "5"]
            )
        }
        logger.notice("identity_banned", metadata: [
            "actor": "\(actor)", "whisperId": "\(whisperId)", "endedSession": "\(outcome.endedSession)", "notified": "\(outcome.notified)",
        ])
        return (Self.ban(row, now: now), outcome.endedSession)
    }

    func unban(_ whisperId: String, note: String?, by actor: String) async throws -> Response {
        try JSONResponse.make(["success": true, "ban": try await performUnban(whisperId, note: note, by: actor)])
    }

    func performUnban(_ whisperId: String, note: String?, by actor: String) async throws -> [String: Any] {
        let now = Clock.millisecondsNow()
        let row: BanRow = try await postgres.adminTransaction(logger: logger) { connection in
            let rows = try await connection.query("""
                UPDATE bans AS b SET lifted_at = now(), lifted_by = \(actor)
                WHERE b.whisper_id = \(whisperId) AND b.lifted_at IS NULL AND (b.expires_at IS NULL OR b.expires_at > now())
                RETURNING \(unescaped: Self.banColumns)
                """, logger: logger)
            guard let row = try await rows.decode(BanRow.self).first(where: { _ in true }) else {
                throw WhisperHTTPError(.notFound, "no ban of this identity is in force")
            }
            try await connection.query(
                "UPDATE users SET status = 'active', updated_at = now() WHERE whisper_id = \(whisperId) AND status = 'banned'",
                logger: logger
            )
            var details = ["ban": String(row.0)]
            if let note { details["note"] = note }
            try await AuditLog.record(on: connection, actor: actor, action: "unban", target: whisperId, details: details, logger: logger)
            return row
        }
        do {
            try await enforcement.unban(whisperId)
        } catch {
            // Caches let go of the ban within their TTL anyway.
            logger.warning("unban_notice_failed", metadata: ["whisperId": "\(whisperId)", "error": "\(error)"])
        }
        logger.notice("identity_unbanned", metadata: ["actor": "\(actor)", "whisperId": "\(whisperId)"])
        return Self.ban(row, now: now)
    }

    /// `GET /admin/bans?state=active|all&whisperId=&limit=&cursor=`: newest first.
    func listBans(_ request: Request) async throws -> Response {
        let query = request.uri.queryParameters
        let state = query["state"].map(String.init) ?? "active"
        guard state == "active" || state == "all" else { throw WhisperHTTPError(.invalidPayload, "state must be active or all") }
        let limit = try AdminBody.limit(request, max: 200, fallback: 50)
        let before = try Self.idCursor(request)
        let whisperId = query["whisperId"].map(String.init)
        if let whisperId, !Format.isWhisperID(whisperId) { throw WhisperHTTPError(.invalidPayload, "whisperId must be a Whisper ID") }
        let (bans, next) = try await bans(activeOnly: state == "active", whisperId: whisperId, limit: limit, before: before)
        var body: [String: Any] = ["bans": bans]
        if let next { body["nextCursor"] = next }
        return try JSONResponse.make(body)
    }

    /// A page of bans, newest first, and the cursor of the next page.
    func bans(activeOnly: Bool, whisperId: String?, limit: Int, before: Int64 = Int64.max) async throws -> ([[String: Any]], String?) {
        let rows = try await postgres.query("""
            SELECT \(unescaped: Self.banColumns) FROM bans b
            WHERE b.id < \(before)
              AND (\(whisperId)::text IS NULL OR b.whisper_id = \(whisperId))
              AND (NOT \(activeOnly) OR (b.lifted_at IS NULL AND (b.expires_at IS NULL OR b.expires_at > now())))
            ORDER BY b.id DESC LIMIT \(limit + 1)
            """, logger: logger)
        let now = Clock.millisecondsNow()
        var bans: [[String: Any]] = []
        for try await row in rows.decode(BanRow.self) { bans.append(Self.ban(row, now: now)) }
        let page = Array(bans.prefix(limit))
        return (page, bans.count > limit ? page.last?["id"] as? String : nil)
    }

    static func idCursor(_ request: Request) throws -> Int64 {
        guard let text = request.uri.queryParameters["cursor"].map(String.init) else { return Int64.max }
        guard let value = Int64(text), value > 0 else { throw WhisperHTTPError(.invalidPayload, "cursor must be a nextCursor from this endpoint") }
        return value
    }

    // MARK: Reports

    static let reportColumns = """
        r.id::text, r.reporter_id, r.reported_id, r.reason, r.details, r.message_ids::text[], r.status,
        (extract(epoch FROM r.created_at) * 1000)::bigint, (extract(epoch FROM r.reviewed_at) * 1000)::bigint,
        r.reviewed_by, r.review_note
        """

    typealias ReportRow = (String, String, String, String, String?, [String], String, Int64, Int64?, String?, String?)

    static func report(_ row: ReportRow) -> [String: Any] {
        let (id, reporter, reported, reason, details, messageIds, status, createdAt, reviewedAt, reviewedBy, note) = row
        return [
            "id": id, "reporterId": reporter, "whisperId": reported, "reason": reason,
            "details": details.map { $0 as Any } ?? NSNull(), "messageIds": messageIds, "status": status, "createdAt": createdAt,
            "reviewedAt": reviewedAt.map { $0 as Any } ?? NSNull(), "reviewedBy": reviewedBy.map { $0 as Any } ?? NSNull(),
            "reviewNote": note.map { $0 as Any } ?? NSNull(),
        ]
    }

    /// Reports shown per reported identity in the list (the newest); `reportCount` has them all.
    static let reportsPerTarget = 20

    func registerReports(on router: Router<ClientRequestContext>) {
        router.get("/admin/reports") { request, _ -> Response in
            _ = try auth.operator(of: request)
            return try await listReports(request)
        }
        router.post("/admin/reports/:id/review") { request, context -> Response in
            let actor = try auth.operator(of: request)
            guard let id = context.parameters.get("id"), Format.isUUID(id) else {
                throw WhisperHTTPError(.notFound, "no such report")
            }
            let body = try await AdminBody.decode(ReviewRequest.self, from: request, fields: ReviewRequest.fields, describe: ReviewRequest.describe)
            guard body.decision == "dismissed" || body.decision == "actioned" else {
                throw WhisperHTTPError(.invalidPayload, "decision must be dismissed or actioned")
            }
            let note = try body.note.map { try AdminBody.text($0, "note", characters: Self.noteCharacters) }
            return try await review(id.lowercased(), decision: body.decision, note: note, by: actor)
        }
    }

    /// `GET /admin/reports?status=open|dismissed|actioned|all&limit=&cursor=`: one item
    /// per reported identity, the most recently reported first, each with its counts and
    /// its newest reports of that status.
    func listReports(_ request: Request) async throws -> Response {
        let query = request.uri.queryParameters
        let status = query["status"].map(String.init) ?? "open"
        guard Self.reportStatuses.contains(status) else {
            throw WhisperHTTPError(.invalidPayload, "status must be open, dismissed, actioned or all")
        }
        let limit = try AdminBody.limit(request, max: 100, fallback: 20)
        let (groups, next) = try await reportGroups(status: status, limit: limit, cursor: query["cursor"].map(String.init))
        var body: [String: Any] = ["reports": groups]
        if let next { body["nextCursor"] = next }
        return try JSONResponse.make(body)
    }

    static let reportStatuses = ["open", "dismissed", "actioned", "all"]

    /// A page of reported identities with their reports, and the next page's cursor.
    func reportGroups(status: String, limit: Int, cursor: String?, onlyFor target: String? = nil) async throws -> ([[String: Any]], String?) {
        // The cursor is `<latest report, µs since 1970>.<Whisper ID>` of the last item.
        var cursorAt = Int64.max, cursorId = "~"
        if let text = cursor {
            let parts = text.split(separator: ".", maxSplits: 1).map(String.init)
            guard parts.count == 2, let at = Int64(parts[0]), Format.isWhisperID(parts[1]) else {
                throw WhisperHTTPError(.invalidPayload, "cursor must be a nextCursor from this endpoint")
            }
            (cursorAt, cursorId) = (at, parts[1])
        }
        let all = status == "all"
        let groups = try await postgres.query("""
            SELECT g.reported_id, g.n, g.latest,
                   EXISTS (SELECT 1 FROM bans b WHERE b.whisper_id = g.reported_id AND b.lifted_at IS NULL
                           AND (b.expires_at IS NULL OR b.expires_at > now()))
            FROM (SELECT reported_id, count(*) AS n, (extract(epoch FROM max(created_at)) * 1000000)::bigint AS latest
                  FROM reports WHERE (\(all) OR status = \(status)) AND (\(target)::text IS NULL OR reported_id = \(target))
                  GROUP BY reported_id) g
            WHERE (g.latest, g.reported_id COLLATE "C") < (\(cursorAt), \(cursorId) COLLATE "C")
            ORDER BY g.latest DESC, g.reported_id COLLATE "C" DESC LIMIT \(limit + 1)
            """, logger: logger)
        var targets: [(id: String, count: Int64, latest: Int64, banned: Bool)] = []
        for try await (id, count, latest, banned) in groups.decode((String, Int64, Int64, Bool).self) {
            targets.append((id, count, latest, banned))
        }
        let page = Array(targets.prefix(limit))
        var reportsByTarget: [String: [[String: Any]]] = [:]
        var reasonsByTarget: [String: [String: Int64]] = [:]
        if !page.isEmpty {
            let ids = page.map(\.id)
            let rows = try await postgres.query("""
                SELECT \(unescaped: Self.reportColumns) FROM (
                    SELECT *, row_number() OVER (PARTITION BY reported_id ORDER BY created_at DESC, id) AS rank
                    FROM reports WHERE reported_id = ANY(\(ids)) AND (\(all) OR status = \(status))) r
                WHERE r.rank <= \(Self.reportsPerTarget) ORDER BY r.reported_id, r.created_at DESC
                """, logger: logger)
            for try await row in rows.decode(ReportRow.self) { reportsByTarget[row.2, default: []].append(Self.report(row)) }
            let reasons = try await postgres.query("""
                SELECT reported_id, reason, count(*) FROM reports
                WHERE reported_id = ANY(\(ids)) AND (\(all) OR status = \(status)) GROUP BY reported_id, reason
                """, logger: logger)
            for try await (id, reason, count) in reasons.decode((String, String, Int64).self) { reasonsByTarget[id, default: [:]][reason] = count }
        }
        let items = page.map { target -> [String: Any] in
            [
                "whisperId": target.id, "reportCount": target.count, "latestAt": target.latest / 1_000,
                "reasons": reasonsByTarget[target.id] ?? [:], "banned": target.banned, "reports": reportsByTarget[target.id] ?? [],
            ]
        }
        return (items, targets.count > limit ? page.last.map { "\($0.latest).\($0.id)" } : nil)
    }

    func review(_ id: String, decision: String, note: String?, by actor: String) async throws -> Response {
        try JSONResponse.make(try await performReview(id, decision: decision, note: note, by: actor))
    }

    func performReview(_ id: String, decision: String, note: String?, by actor: String) async throws -> [String: Any] {
        let row: ReportRow = try await postgres.adminTransaction(logger: logger) { connection in
            let rows = try await connection.query("""
                UPDATE reports AS r SET status = \(decision), reviewed_at = now(), reviewed_by = \(actor), review_note = \(note)
                WHERE r.id = \(id)::uuid AND r.status = 'open' RETURNING \(unescaped: Self.reportColumns)
                """, logger: logger)
            guard let row = try await rows.decode(ReportRow.self).first(where: { _ in true }) else {
                let status = try await connection.query("SELECT status FROM reports WHERE id = \(id)::uuid", logger: logger)
                    .decode(String.self).first { _ in true }
                guard let status else { throw WhisperHTTPError(.notFound, "no such report") }
                throw WhisperHTTPError(.forbidden, "this report was already reviewed (\(status))")
            }
            var details = ["decision": decision, "reported": row.2]
            if let note { details["note"] = note }
            try await AuditLog.record(on: connection, actor: actor, action: "report.review", target: id, details: details, logger: logger)
            return row
        }
        logger.info("report_reviewed", metadata: ["actor": "\(actor)", "reportId": "\(id)", "decision": "\(decision)"])
        return Self.report(row)
    }
}
