import Foundation
import Hummingbird
import Logging
import PostgresNIO
import WhisperMessaging
import WhisperShared

/// `GET /admin/stats`: the deployment in figures, from Postgres (identities, devices,
/// groups, bans, reports, attachments, backups) and Redis (sockets per gateway, streams
/// waiting, the pending queues' last census). Counts only: never a key, a token or content.
struct AdminStats: Sendable {
    let auth: AdminAuth
    let postgres: PostgresClient
    let redis: RedisClient
    let logger: Logger

    /// A gateway that has not reported for this long is counted gone (it reports every
    /// presence refresh, 30 s by default).
    static let gatewayReportMaxAge: Duration = .seconds(90)

    func register(on router: Router<ClientRequestContext>) {
        router.get("/admin/stats") { request, _ -> Response in
            _ = try auth.operator(of: request)
            return try JSONResponse.make(try await figures())
        }
    }

    func figures() async throws -> [String: Any] {
        let rows = try await postgres.query("""
            SELECT
              (SELECT count(*) FROM users),
              (SELECT count(*) FROM devices WHERE active),
              (SELECT count(*) FROM devices WHERE active AND last_seen_at > now() - interval '1 day'),
              (SELECT count(*) FROM groups),
              (SELECT count(*) FROM bans WHERE lifted_at IS NULL AND (expires_at IS NULL OR expires_at > now())),
              (SELECT count(*) FROM reports WHERE status = 'open'),
              (SELECT count(DISTINCT reported_id) FROM reports WHERE status = 'open'),
              (SELECT count(*) FROM attachments WHERE deleted_at IS NULL),
              (SELECT COALESCE(sum(size_bytes), 0)::bigint FROM attachments WHERE deleted_at IS NULL),
              (SELECT count(*) FROM contact_backups)
            """, logger: logger)
        var body: [String: Any] = [:]
        for try await row in rows.decode((Int64, Int64, Int64, Int64, Int64, Int64, Int64, Int64, Int64, Int64).self) {
            body["identities"] = row.0
            body["devices"] = ["active": row.1, "seenLastDay": row.2]
            body["groups"] = row.3
            body["bansInForce"] = row.4
            body["reports"] = ["open": row.5, "reportedIdentities": row.6]
            body["attachments"] = ["live": row.7, "bytes": row.8]
            body["contactBackups"] = row.9
        }
        let now = Clock.millisecondsNow()
        let gateways = try await GatewayCensus.read(now: now, maxAge: Self.gatewayReportMaxAge, on: redis)
        body["connections"] = [
            "open": gateways.reduce(0) { $0 + $1.open },
            "signedIn": gateways.reduce(0) { $0 + $1.signedIn },
            "gateways": gateways.map { ["instance": $0.instance, "open": $0.open, "signedIn": $0.signedIn, "reportedAt": $0.reportedAt] },
        ]
        // Every shard of each stream (`StreamShards`), summed; the busiest shard too.
        let shards = redis.configuration.streamShards
        let keys = shards.keys(RouterStream.key) + shards.keys(PushStream.key)
        let lengths = try await redis.pipeline(keys.map { RedisCommand("XLEN", $0) }).map { $0.int ?? 0 }
        let router = lengths.prefix(shards.count), push = lengths.suffix(shards.count)
        body["streams"] = [
            "router": router.reduce(0, +), "push": push.reduce(0, +), "shards": shards.count,
            "routerBusiestShard": router.max() ?? 0, "pushBusiestShard": push.max() ?? 0,
        ]
        if let sample = try await PendingCensus.latest(on: redis) {
            body["pending"] = ["messages": sample.messages, "queues": sample.queues, "sampledAt": sample.sampledAt]
        } else {
            body["pending"] = ["messages": NSNull(), "queues": NSNull(), "sampledAt": NSNull()]
        }
        body["serverTime"] = now
        return body
    }
}
