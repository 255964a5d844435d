import Logging
import PostgresNIO
import WhisperShared

/// `report_user`: an identity reports another for operators to review (docs/protocol.md section 9,
/// docs/protocol.md section 9). One open report per reporter and reported identity: a
/// repeated report adds its messages to the open one (up to
/// `Limits.MAX_REPORT_MESSAGE_IDS`) and answers with the same `reportId`, so reports
/// cannot pile up beyond what operators can read.
struct ReportDesk: Sendable {
    let postgres: PostgresClient
    let sessions: SessionStore
    let limiter: RateLimiter
    let rules: LimitRules
    let metrics: ServiceMetrics
    let logger: Logger

    func file(_ request: ReportUser, context: ConnectionContext) async throws -> ReportAccepted {
        guard let record = try await sessions.lookup(request.sessionToken),
              context.whisperId == nil || context.whisperId == record.whisperId else {
            throw WhisperError(.notRegistered, "no valid session for this connection; register first")
        }
        let reporter = record.whisperId
        guard request.whisperId != reporter else {
            throw WhisperError(.invalidPayload, "whisperId: an identity cannot report itself")
        }
        try await limiter.charge(.reportPerIdentity, key: reporter, rules: rules)
        let reportId = RandomID.uuid()
        let messageIds = request.reportedMessageIds
        let rows = try await postgres.query("""
            INSERT INTO reports AS r (id, reporter_id, reported_id, reason, details, message_ids)
            SELECT \(reportId)::uuid, \(reporter), u.whisper_id, \(request.reason.rawValue), \(request.details), \(messageIds)::uuid[]
            FROM users u WHERE u.whisper_id = \(request.whisperId)
            ON CONFLICT (reporter_id, reported_id) WHERE status = 'open' DO UPDATE SET
                details = COALESCE(EXCLUDED.details, r.details),
                message_ids = (
                    SELECT COALESCE(array_agg(m ORDER BY first), '{}') FROM (
                        SELECT m, min(n) AS first FROM unnest(r.message_ids || EXCLUDED.message_ids) WITH ORDINALITY AS t(m, n)
                        GROUP BY m ORDER BY min(n) LIMIT \(Limits.MAX_REPORT_MESSAGE_IDS)) kept)
            RETURNING r.id::text, (xmax = 0)
            """, logger: logger)
        guard let (id, created) = try await rows.decode((String, Bool).self).first(where: { _ in true }) else {
            throw WhisperError(.notFound, "no such identity")
        }
        metrics.counter("reports", help: "report_user frames accepted, by whether they opened a report or added to one.", labels: [
            ("outcome", created ? "opened" : "merged"),
        ]).increment()
        logger.info("report_filed", metadata: [
            "reportId": "\(id)", "reporter": "\(reporter)", "reported": "\(request.whisperId)", "reason": "\(request.reason.rawValue)",
            "messages": "\(messageIds.count)", "merged": "\(!created)",
        ])
        return ReportAccepted(reportId: id)
    }
}
