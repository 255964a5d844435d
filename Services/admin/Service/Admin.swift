import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import PostgresNIO
import WhisperShared

/// Settings of admin (docs/configuration.md lists each variable).
public struct AdminSettings: ServiceSettings {
    public static let serviceName = "admin"
    public static let defaultPort = 8086
    public var common: CommonSettings
    /// Operators' bearer tokens, by name (`ADMIN_TOKENS=alice:<token>,ci:<token>`). The
    /// name is the actor in the audit log. Not needed by `admin migrate`; the service
    /// refuses to start without one.
    public var tokens: [(name: String, token: String)]
    /// Mark the console's cookies `Secure` (serve the console over TLS, then set this).
    public var consoleSecureCookies: Bool
    /// The console's limit on failed sign-ins (`Limit.consoleSignInFailures`).
    public var limits = LimitRules()

    public init(common: CommonSettings, tokens: [(name: String, token: String)] = [], consoleSecureCookies: Bool = false) {
        self.common = common
        self.tokens = tokens
        self.consoleSecureCookies = consoleSecureCookies
    }

    public init(from settings: SettingsReader) {
        common = CommonSettings(service: Self.serviceName, defaultPort: Self.defaultPort, from: settings)
        var tokens: [(String, String)] = []
        for entry in settings.list("admin.tokens", default: [], secret: true) {
            let parts = entry.split(separator: ":", maxSplits: 1).map(String.init)
            guard parts.count == 2, AdminTokens.isName(parts[0]), parts[1].utf8.count >= 32 else {
                settings.reject("admin.tokens", because: "each entry must be <name>:<token>, the name [a-z0-9-]{1,32}, the token at least 32 characters")
                continue
            }
            tokens.append((parts[0], parts[1]))
        }
        self.tokens = tokens
        consoleSecureCookies = settings.bool("admin.console.secure.cookies", default: false)
        limits = LimitRules(from: settings, service: Self.serviceName)
    }
}

/// Operators' tokens, kept as SHA-256 digests only; a presented token is hashed and
/// compared with every digest in constant time.
public struct AdminTokens: Sendable {
    let digests: [(name: String, digest: [UInt8])]

    public init(_ tokens: [(name: String, token: String)]) {
        digests = tokens.map { ($0.name, Array(SHA256.hash(data: Array($0.token.utf8)))) }
    }

    /// The operator's name, or nil.
    public func name(for presented: String) -> String? {
        let digest = Array(SHA256.hash(data: Array(presented.utf8)))
        var found: String?
        for entry in digests where SecureBytes.constantTimeEqual(entry.digest, digest) && found == nil {
            found = entry.name
        }
        return found
    }

    static func isName(_ value: String) -> Bool {
        (1...32).contains(value.utf8.count)
            && value.utf8.allSatisfy {
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || $0 == UInt8(ascii: "-")
            }
    }
}

/// Assembles one admin instance: the operator API (stats, reports, bans, audit, GC
/// runs). `admin migrate` is a subcommand (MigrateCommand).
public func buildAdmin(settings: AdminSettings, logger: Logger, onServerRunning: (@Sendable (Int) async -> Void)? = nil) -> HTTPServiceHandle {
    buildHTTPService(
        settings: settings.common,
        logger: logger,
        routes: { router, environment in
            AdminRoutes(
                tokens: AdminTokens(settings.tokens), postgres: environment.postgres, redis: environment.redis,
                consoleSecureCookies: settings.consoleSecureCookies, limits: settings.limits, logger: environment.logger
            ).register(on: router)
        },
        startupProblems: settings.tokens.isEmpty ? ["no admin token (ADMIN_TOKENS)"] : [],
        onServerRunning: onServerRunning
    )
}

struct AdminRoutes: Sendable {
    let tokens: AdminTokens
    let postgres: PostgresClient
    let redis: RedisClient
    let consoleSecureCookies: Bool
    let limits: LimitRules
    let logger: Logger

    var auth: AdminAuth { AdminAuth(tokens: tokens) }

    func register(on router: Router<ClientRequestContext>) {
        registerAudit(on: router)
        let moderation = Moderation(
            auth: auth, postgres: postgres, enforcement: BanEnforcement(redis: redis), logger: logger
        )
        moderation.registerBans(on: router)
        moderation.registerReports(on: router)
        let stats = AdminStats(auth: auth, postgres: postgres, redis: redis, logger: logger)
        stats.register(on: router)
        Console(
            auth: auth, moderation: moderation, stats: stats, sessions: ConsoleSessions(redis: redis), postgres: postgres, redis: redis,
            limiter: RateLimiter(redis: redis), limits: limits, secureCookies: consoleSecureCookies, logger: logger
        ).register(on: router)
        router.post("/admin/attachments/gc/run") { request, _ -> Response in
            let actor = try authenticate(request)
            let jobId = RandomID.uuid()
            let now = Clock.millisecondsNow()
            // The audit row and the request commit together: a request that could not
            // be queued leaves no record of having been made.
            try await postgres.withTransaction(logger: logger) { connection in
                try await AuditLog.record(
                    on: connection, actor: actor, action: "attachments.gc.run", target: jobId, details: [:], logger: logger
                )
                try await GCRuns.queue(jobId, requestedBy: actor, at: now, on: redis)
            }
            logger.info("gc_run_requested", metadata: ["actor": "\(actor)", "jobId": "\(jobId)"])
            var response = try JSONResponse.make(["jobId": jobId, "state": "queued"])
            response.status = .accepted
            return response
        }
        router.get("/admin/attachments/gc/runs/:jobId") { request, context -> Response in
            _ = try authenticate(request)
            guard let jobId = context.parameters.get("jobId"), Format.isUUID(jobId),
                  let run = try await GCRuns.read(jobId, on: redis) else {
                throw WhisperHTTPError(.notFound, "no such GC run")
            }
            return try JSONResponse.make(run)
        }
    }

    /// `GET /admin/audit?limit=&cursor=`: newest first; `nextCursor` continues.
    func registerAudit(on router: Router<ClientRequestContext>) {
        router.get("/admin/audit") { request, _ -> Response in
            _ = try authenticate(request)
            let limit = try AdminBody.limit(request, max: 200, fallback: 50)
            let (rows, more) = try await AuditLog.page(before: try Moderation.idCursor(request), limit: limit, on: postgres, logger: logger)
            let events = rows.map { row -> [String: Any] in
                var event: [String: Any] = ["id": row.id, "occurredAt": row.occurredAt, "actor": row.actor, "action": row.action]
                event["target"] = row.target
                event["details"] = (try? JSONSerialization.jsonObject(with: Data(row.details.utf8))) ?? [:]
                return event
            }
            var body: [String: Any] = ["events": events]
            if more, let last = rows.last { body["nextCursor"] = String(last.id) }
            return try JSONResponse.make(body)
        }
    }

    private func authenticate(_ request: Request) throws -> String {
        try auth.operator(of: request)
    }
}

/// The operator behind `Authorization: Bearer <admin token>`, or 401 `AUTH_FAILED`.
struct AdminAuth: Sendable {
    let tokens: AdminTokens

    func `operator`(of request: Request) throws -> String {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer "),
              let name = tokens.name(for: String(header.dropFirst("Bearer ".count))) else {
            throw WhisperHTTPError(.authFailed, "an admin token is required", headers: [.wwwAuthenticate: "Bearer"])
        }
        return name
    }
}

/// `audit_events`: who did what to what, written in the transaction of the action.
enum AuditLog {
    typealias Row = (id: Int64, occurredAt: Int64, actor: String, action: String, target: String?, details: String)

    /// Up to `limit` events with an id below `before`, newest first, and whether older
    /// ones follow (for `GET /admin/audit` and the console's page).
    static func page(before: Int64, limit: Int, on postgres: PostgresClient, logger: Logger) async throws -> (rows: [Row], more: Bool) {
        let rows = try await postgres.query("""
            SELECT id, (extract(epoch FROM occurred_at) * 1000)::bigint, actor, action, target, details::text
            FROM audit_events WHERE id < \(before) ORDER BY id DESC LIMIT \(limit + 1)
            """, logger: logger)
        var page: [Row] = []
        for try await row in rows.decode((Int64, Int64, String, String, String?, String).self) { page.append(row) }
        return (Array(page.prefix(limit)), page.count > limit)
    }

    static func record(
        on connection: PostgresConnection, actor: String, action: String, target: String?, details: [String: String], logger: Logger
    ) async throws {
        let json = String(decoding: try JSONSerialization.data(withJSONObject: details, options: [.sortedKeys]), as: UTF8.self)
        try await connection.query("""
            INSERT INTO audit_events (actor, action, target, details) VALUES (\(actor), \(action), \(target), \(json)::jsonb)
            """, logger: logger)
    }
}

extension AdminSettings: RedactedDescription {}
extension AdminTokens: RedactedDescription {}
