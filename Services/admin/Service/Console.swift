import Foundation
import Hummingbird
import Logging
import PostgresNIO
import WhisperShared

/// The operator console under `/console`: server-rendered, no script. Sign-in with an
/// admin token; the session cookie (`HttpOnly`, `SameSite=Strict`) is kept in Redis as a
/// digest, every form carries a CSRF token, and actions go through `Moderation`, audited.
struct Console: Sendable {
    let auth: AdminAuth
    let moderation: Moderation
    let stats: AdminStats
    let sessions: ConsoleSessions
    let postgres: PostgresClient
    let redis: RedisClient
    let limiter: RateLimiter
    /// Failed sign-in attempts, all addresses together (`Limit.consoleSignInFailures`): a
    /// token cannot be guessed, but each attempt costs a hash per configured token and a
    /// log line.
    let limits: LimitRules
    /// Adds `Secure` to the cookies (behind TLS; `ADMIN_CONSOLE_SECURE_COOKIES`).
    let secureCookies: Bool
    let logger: Logger

    static let sessionCookie = "whisper_console"
    static let loginCookie = "whisper_console_login"

    func cookie(_ name: String, _ value: String, maxAge: Int) -> String {
        "\(name)=\(value); Path=/console; HttpOnly; SameSite=Strict; Max-Age=\(maxAge)" + (secureCookies ? "; Secure" : "")
    }

    func register(on router: Router<ClientRequestContext>) {
        router.get("/console/style.css") { _, _ -> Response in
            var headers = HTML.securityHeaders
            headers[.contentType] = "text/css; charset=utf-8"
            headers[.cacheControl] = "public, max-age=3600"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: HTML.stylesheet)))
        }
        router.get("/console/icon.svg") { _, _ -> Response in
            var headers = HTML.securityHeaders
            headers[.contentType] = "image/svg+xml"
            headers[.cacheControl] = "public, max-age=86400"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: HTML.icon)))
        }
        router.get("/console/login") { _, _ -> Response in
            signInPage(error: nil, status: .ok)
        }
        router.post("/console/login") { request, _ -> Response in
            try await signIn(request)
        }
        router.post("/console/logout") { request, _ -> Response in
            let (session, id, _) = try await requireForm(request)
            try await sessions.end(id)
            logger.info("console_signed_out", metadata: ["actor": "\(session.operator)"])
            return HTML.redirect(to: "/console/login", cookies: [cookie(Self.sessionCookie, "", maxAge: 0)])
        }
        router.get("/console") { request, _ -> Response in
            try await page(request) { session in try await figuresPage(session) }
        }
        router.get("/console/reports") { request, _ -> Response in
            try await page(request) { session in try await reportsPage(request, session) }
        }
        router.post("/console/reports/:id/review") { request, context -> Response in
            let (session, _, form) = try await requireForm(request)
            let id = context.parameters.get("id") ?? ""
            guard Format.isUUID(id) else { return HTML.redirect(to: "/console/reports") }
            let decision = form["decision"] ?? ""
            do {
                guard decision == "dismissed" || decision == "actioned" else {
                    throw WhisperHTTPError(.invalidPayload, "choose dismissed or actioned")
                }
                let note = try nonEmpty(form["note"]).map { try AdminBody.text($0, "note", characters: Moderation.noteCharacters) }
                _ = try await moderation.performReview(id.lowercased(), decision: decision, note: note, by: session.operator)
                return HTML.redirect(to: "/console/reports?notice=reviewed")
            } catch let error as WhisperHTTPError {
                return try await reportsPage(request, session, error: error.error.message, status: .init(code: error.error.code.httpStatus))
            }
        }
        router.get("/console/bans") { request, _ -> Response in
            try await page(request) { session in try await bansPage(request, session) }
        }
        router.post("/console/ban") { request, _ -> Response in
            let (session, _, form) = try await requireForm(request)
            do {
                let hours = try nonEmpty(form["durationHours"]).map { text -> Int64 in
                    guard let hours = Int64(text), (1...87_600).contains(hours) else {
                        throw WhisperHTTPError(.invalidPayload, "the duration must be 1 to 87,600 hours, or empty for no end")
                    }
                    return hours
                }
                let body = Moderation.BanRequest(
                    whisperId: (form["whisperId"] ?? "").trimmingCharacters(in: .whitespaces).uppercased(), reason: form["reason"] ?? "",
                    expiresAt: nil, durationSeconds: hours.map { $0 * 3_600 }
                )
                let now = Clock.millisecondsNow()
                let (whisperId, reason, expiresAt) = try Moderation.checked(body, now: now)
                guard form["confirmed"] == "yes" else {
                    return confirmation(session, title: "Ban \(whisperId)?", action: "/console/ban", button: "Ban", back: "/console/bans", fields: [
                        "whisperId": whisperId, "reason": reason, "durationHours": hours.map(String.init) ?? "",
                    ], body: """
                        <table id="confirm-details"><tr><th>Whisper ID</th><td>\(HTML.escape(whisperId))</td></tr>
                        <tr><th>reason</th><td>\(HTML.escape(reason))</td></tr>
                        <tr><th>until</th><td>\(HTML.until(expiresAt, now: now))</td></tr></table>
                        <p>Its session ends and its socket closes at once, on every gateway; it cannot sign in until the ban ends or is lifted.</p>
                        """)
                }
                _ = try await moderation.performBan(whisperId, reason: reason, expiresAt: expiresAt, by: session.operator)
                return HTML.redirect(to: "/console/bans?notice=banned&whisperId=\(HTML.query(whisperId))")
            } catch let error as WhisperHTTPError {
                return try await bansPage(request, session, error: error.error.message, status: .init(code: error.error.code.httpStatus), form: form)
            }
        }
        router.post("/console/unban") { request, _ -> Response in
            let (session, _, form) = try await requireForm(request)
            let whisperId = form["whisperId"] ?? ""
            do {
                guard Format.isWhisperID(whisperId) else { throw WhisperHTTPError(.invalidPayload, "not a Whisper ID") }
                let note = try nonEmpty(form["note"]).map { try AdminBody.text($0, "note", characters: Moderation.noteCharacters) }
                guard form["confirmed"] == "yes" else {
                    guard let ban = try await moderation.bans(activeOnly: true, whisperId: whisperId, limit: 1).0.first else {
                        throw WhisperHTTPError(.notFound, "\(whisperId) has no ban in force")
                    }
                    return confirmation(session, title: "Lift the ban of \(whisperId)?", action: "/console/unban", button: "Lift the ban",
                                        back: "/console/bans", fields: ["whisperId": whisperId, "note": note ?? ""], body: """
                        <table id="confirm-details"><tr><th>Whisper ID</th><td>\(HTML.escape(whisperId))</td></tr>
                        <tr><th>reason</th><td>\(HTML.escape(ban["reason"] as? String ?? ""))</td></tr>
                        <tr><th>banned by</th><td>\(HTML.escape(ban["bannedBy"] as? String ?? ""))</td></tr>
                        <tr><th>since</th><td>\(HTML.time(ban["createdAt"] as? Int64))</td></tr>
                        <tr><th>until</th><td>\(HTML.until(ban["expiresAt"] as? Int64, now: Clock.millisecondsNow()))</td></tr></table>
                        <p>It can sign in again at once.</p>
                        """)
                }
                _ = try await moderation.performUnban(whisperId, note: note, by: session.operator)
                return HTML.redirect(to: "/console/bans?notice=unbanned&whisperId=\(HTML.query(whisperId))")
            } catch let error as WhisperHTTPError {
                return try await bansPage(request, session, error: error.error.message, status: .init(code: error.error.code.httpStatus))
            }
        }
        router.get("/console/audit") { request, _ -> Response in
            try await page(request) { session in try await auditPage(request, session) }
        }
        router.get("/console/users") { request, _ -> Response in
            try await page(request) { session in try await userPage(request, session) }
        }
    }

    // MARK: Sessions

    private func nonEmpty(_ value: String?) throws -> String? {
        guard let value, !value.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else { return nil }
        return value
    }

    private func signInPage(error: String?, status: HTTPResponse.Status) -> Response {
        // A fresh value per form, in a cookie and in the form: a sign-in can only be
        // posted from this page (no signing a browser in as someone else).
        let nonce = Base64URL.encode(SecureBytes.random(24))
        let body = """
            <form method="post" action="/console/login" id="login">
            <input type="hidden" name="csrf" value="\(nonce)">
            <label>Admin token <input type="password" name="token" autocomplete="current-password" required></label>
            <button type="submit">Sign in</button></form>
            <p>The token is one of <code>ADMIN_TOKENS</code> (<code>scripts/up</code> keeps its own in <code>.data/admin-token</code>).</p>
            """
        return HTML.response(
            HTML.page(title: "Sign in", session: nil, error: error, body: body), status: status,
            cookies: [cookie(Self.loginCookie, nonce, maxAge: 1_800)]
        )
    }

    private func signIn(_ request: Request) async throws -> Response {
        let form = try await ConsoleRequest.form(request)
        guard ConsoleRequest.sameOrigin(request), let expected = ConsoleRequest.cookie(Self.loginCookie, in: request),
              let given = form["csrf"], SecureBytes.constantTimeEqual(Array(expected.utf8), Array(given.utf8)) else {
            logger.info("console_sign_in_form_refused", metadata: [
                "sameOrigin": "\(ConsoleRequest.sameOrigin(request))", "cookie": "\(ConsoleRequest.cookie(Self.loginCookie, in: request) != nil)",
                "field": "\(form["csrf"] != nil)",
            ])
            return signInPage(error: "The form expired; sign in again.", status: .forbidden)
        }
        // Only failures are charged: a valid token is never refused, so nobody who can
        // reach the page can lock operators out by spending the bucket (issue 34). Tokens
        // are at least 32 characters, so the limit is not what stops guessing; it caps the
        // work and the log lines failed attempts cost.
        guard let token = form["token"], let operatorName = auth.tokens.name(for: token.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            if case .limited = try await limiter.take(.consoleSignInFailures, key: "all", rules: limits) {
                return signInPage(error: "Too many failed sign-in attempts; wait a minute.", status: .tooManyRequests)
            }
            logger.warning("console_sign_in_refused")
            return signInPage(error: "That is not an admin token.", status: .unauthorized)
        }
        let (id, _) = try await sessions.create(for: operatorName)
        logger.info("console_signed_in", metadata: ["actor": "\(operatorName)"])
        return HTML.redirect(to: "/console", cookies: [
            cookie(Self.sessionCookie, id, maxAge: Int(ConsoleSessions.lifetime.components.seconds)), cookie(Self.loginCookie, "", maxAge: 0),
        ])
    }

    private func session(of request: Request) async throws -> (ConsoleSessions.Session, String)? {
        guard let id = ConsoleRequest.cookie(Self.sessionCookie, in: request), let session = try await sessions.lookup(id) else { return nil }
        return (session, id)
    }

    /// A page for a signed-in operator, else the sign-in page.
    private func page(_ request: Request, _ render: (ConsoleSessions.Session) async throws -> Response) async throws -> Response {
        guard let (session, _) = try await session(of: request) else { return HTML.redirect(to: "/console/login") }
        return try await render(session)
    }

    /// A posted form of a signed-in operator, with its CSRF token checked; 403 otherwise
    /// (and nothing done).
    private func requireForm(_ request: Request) async throws -> (ConsoleSessions.Session, String, [String: String]) {
        guard let (session, id) = try await session(of: request) else {
            throw ConsoleRefusal(status: .forbidden, message: "Not signed in (or the session ended); sign in again.")
        }
        let form = try await ConsoleRequest.form(request)
        guard ConsoleRequest.sameOrigin(request), let given = form["csrf"],
              SecureBytes.constantTimeEqual(Array(given.utf8), Array(session.csrf.utf8)) else {
            logger.warning("console_csrf_refused", metadata: ["actor": "\(session.operator)"])
            throw ConsoleRefusal(status: .forbidden, message: "The form did not come from this console (CSRF check); nothing was changed.")
        }
        return (session, id, form)
    }

    /// The step before a ban or a lift: what is about to happen, and a form that posts
    /// the same fields again with `confirmed=yes` (no script: the console has none).
    private func confirmation(
        _ session: ConsoleSessions.Session, title: String, action: String, button: String, back: String, fields: [String: String], body: String
    ) -> Response {
        var html = body + "<form method=\"post\" action=\"\(action)\" id=\"confirm\">\(HTML.csrfField(session))"
        for (name, value) in fields.sorted(by: { $0.key < $1.key }) {
            html += "<input type=\"hidden\" name=\"\(HTML.escape(name))\" value=\"\(HTML.escape(value))\">"
        }
        html += "<input type=\"hidden\" name=\"confirmed\" value=\"yes\"><button type=\"submit\">\(HTML.escape(button))</button> "
            + "<a href=\"\(back)\" id=\"cancel\">Cancel</a></form>"
        return HTML.response(HTML.page(title: title, session: session, body: html))
    }

    // MARK: Pages

    private func figuresPage(_ session: ConsoleSessions.Session) async throws -> Response {
        let figures = try await stats.figures()
        func number(_ value: Any?) -> String { value.map { "\($0)" }.map(HTML.escape) ?? "—" }
        func nested(_ key: String, _ field: String) -> Any? { (figures[key] as? [String: Any])?[field] }
        let cards: [(String, Any?)] = [
            ("Identities", figures["identities"]), ("Active devices", nested("devices", "active")),
            ("Seen in the last day", nested("devices", "seenLastDay")), ("Open sockets", nested("connections", "open")),
            ("Signed-in sockets", nested("connections", "signedIn")), ("Pending messages", nested("pending", "messages")),
            ("Groups", figures["groups"]), ("Bans in force", figures["bansInForce"]), ("Open reports", nested("reports", "open")),
            ("Live attachments", nested("attachments", "live")), ("Router stream waiting", nested("streams", "router")),
            ("Push stream waiting", nested("streams", "push")),
        ]
        var body = "<div class=\"figures\">"
        for (label, value) in cards {
            body += "<div class=\"figure\"><div class=\"value\">\(number(value is NSNull ? nil : value))</div><div>\(HTML.escape(label))</div></div>"
        }
        body += "</div><h2>Gateways</h2><table id=\"gateways\"><tr><th>instance</th><th>open</th><th>signed in</th><th>reported</th></tr>"
        for gateway in nested("connections", "gateways") as? [[String: Any]] ?? [] {
            body += "<tr><td>\(HTML.escape(gateway["instance"] as? String ?? ""))</td><td>\(number(gateway["open"]))</td>"
                + "<td>\(number(gateway["signedIn"]))</td><td>\(HTML.time(gateway["reportedAt"] as? Int64))</td></tr>"
        }
        body += "</table>"
        return HTML.response(HTML.page(title: "Figures", session: session, body: body))
    }

    private func reportsPage(
        _ request: Request, _ session: ConsoleSessions.Session, error: String? = nil, status: HTTPResponse.Status = .ok
    ) async throws -> Response {
        let query = request.uri.queryParameters
        let wanted = query["status"].map(String.init) ?? "open"
        let chosen = Moderation.reportStatuses.contains(wanted) ? wanted : "open"
        let cursor = query["cursor"].map(String.init)
        let (groups, next) = try await moderation.reportGroups(status: chosen, limit: 20, cursor: cursor.flatMap { $0.isEmpty ? nil : $0 })
        var body = "<p>Show: " + Moderation.reportStatuses.map {
            $0 == chosen ? "<strong>\($0)</strong>" : "<a href=\"/console/reports?status=\($0)\">\($0)</a>"
        }.joined(separator: " · ") + "</p>"
        if groups.isEmpty { body += "<p id=\"no-reports\">No \(HTML.escape(chosen == "all" ? "" : chosen)) reports.</p>" }
        for group in groups {
            let whisperId = group["whisperId"] as? String ?? ""
            let reasons = (group["reasons"] as? [String: Int64] ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
            body += "<section class=\"report-group\" data-whisper-id=\"\(HTML.escape(whisperId))\"><h2><a href=\"/console/users?whisperId=\(HTML.query(whisperId))\">"
                + "\(HTML.escape(whisperId))</a> · \(group["reportCount"] ?? 0) report(s) · \(HTML.escape(reasons))"
                + ((group["banned"] as? Bool ?? false) ? " · <span class=\"banned\">banned</span>" : "") + "</h2>"
            body += "<table><tr><th>reported</th><th>by</th><th>reason</th><th>details</th><th>messages</th><th>status</th><th></th></tr>"
            for report in group["reports"] as? [[String: Any]] ?? [] {
                let id = report["id"] as? String ?? ""
                let open = report["status"] as? String == "open"
                body += "<tr id=\"report-\(HTML.escape(id))\"><td>\(HTML.time(report["createdAt"] as? Int64))</td>"
                    + "<td>\(HTML.escape(report["reporterId"] as? String ?? ""))</td><td>\(HTML.escape(report["reason"] as? String ?? ""))</td>"
                    + "<td>\(HTML.escape(report["details"] as? String ?? ""))</td><td>\((report["messageIds"] as? [String] ?? []).count)</td>"
                    + "<td>\(HTML.escape(report["status"] as? String ?? ""))\(open ? "" : " by \(HTML.escape(report["reviewedBy"] as? String ?? ""))")</td><td>"
                if open {
                    body += "<form method=\"post\" action=\"/console/reports/\(HTML.escape(id))/review\" class=\"inline\">\(HTML.csrfField(session))"
                        + "<input type=\"text\" name=\"note\" placeholder=\"note (optional)\" maxlength=\"1000\">"
                        + "<button name=\"decision\" value=\"dismissed\">Dismiss</button> <button name=\"decision\" value=\"actioned\">Actioned</button></form>"
                }
                body += "</td></tr>"
            }
            body += "</table></section>"
        }
        if let next { body += "<p><a href=\"/console/reports?status=\(chosen)&amp;cursor=\(HTML.query(next))\">Older</a></p>" }
        let notice = query["notice"].map(String.init) == "reviewed" ? "Report reviewed." : nil
        return HTML.response(HTML.page(title: "Reports", session: session, notice: notice, error: error, body: body), status: status)
    }

    private func bansPage(
        _ request: Request, _ session: ConsoleSessions.Session, error: String? = nil, status: HTTPResponse.Status = .ok,
        form: [String: String] = [:]
    ) async throws -> Response {
        let query = request.uri.queryParameters
        let showAll = query["state"].map(String.init) == "all"
        let (bans, _) = try await moderation.bans(activeOnly: !showAll, whisperId: nil, limit: 200)
        let now = Clock.millisecondsNow()
        var notice: String?
        if let done = query["notice"].map(String.init), let whisperId = query["whisperId"].map(String.init), Format.isWhisperID(whisperId) {
            notice = done == "banned" ? "\(whisperId) is banned." : done == "unbanned" ? "The ban of \(whisperId) is lifted." : nil
        }
        var body = """
            <fieldset><legend>Ban an identity</legend>
            <form method="post" action="/console/ban" id="ban-form">\(HTML.csrfField(session))
            <label>Whisper ID <input type="text" name="whisperId" required pattern="WSP-[A-Za-z2-7]{4}-[A-Za-z2-7]{4}-[A-Za-z2-7]{4}" \
            value="\(HTML.escape(form["whisperId"] ?? query["whisperId"].map(String.init) ?? ""))"></label>
            <label>Reason <input type="text" name="reason" required maxlength="500" value="\(HTML.escape(form["reason"] ?? ""))"></label>
            <label>Duration in hours (empty: until lifted) <input type="text" name="durationHours" inputmode="numeric" \
            value="\(HTML.escape(form["durationHours"] ?? ""))"></label>
            <button type="submit">Ban</button></form>
            <p>The identity's session ends and its socket closes at once, on every gateway.</p></fieldset>
            <p>\(showAll ? "<a href=\"/console/bans\">In force only</a>" : "<a href=\"/console/bans?state=all\">With history</a>")</p>
            <table id="bans"><tr><th>Whisper ID</th><th>reason</th><th>by</th><th>since</th><th>until</th><th>state</th><th></th></tr>
            """
        for ban in bans {
            let whisperId = ban["whisperId"] as? String ?? ""
            let state = ban["state"] as? String ?? ""
            body += "<tr data-whisper-id=\"\(HTML.escape(whisperId))\"><td><a href=\"/console/users?whisperId=\(HTML.query(whisperId))\">\(HTML.escape(whisperId))</a></td>"
                + "<td>\(HTML.escape(ban["reason"] as? String ?? ""))</td><td>\(HTML.escape(ban["bannedBy"] as? String ?? ""))</td>"
                + "<td>\(HTML.time(ban["createdAt"] as? Int64))</td><td>\(HTML.until(ban["expiresAt"] as? Int64, now: now))</td><td>\(HTML.escape(state))</td><td>"
            if state == "active" {
                body += "<form method=\"post\" action=\"/console/unban\" class=\"inline\">\(HTML.csrfField(session))"
                    + "<input type=\"hidden\" name=\"whisperId\" value=\"\(HTML.escape(whisperId))\"><button type=\"submit\">Lift</button></form>"
            }
            body += "</td></tr>"
        }
        body += "</table>"
        if bans.isEmpty { body += "<p id=\"no-bans\">No bans\(showAll ? "" : " in force").</p>" }
        return HTML.response(HTML.page(title: "Bans", session: session, notice: notice, error: error, body: body), status: status)
    }

    private func auditPage(_ request: Request, _ session: ConsoleSessions.Session) async throws -> Response {
        let before = (request.uri.queryParameters["cursor"].map(String.init)).flatMap { Int64($0) }.map { max(1, $0) } ?? Int64.max
        let (events, more) = try await AuditLog.page(before: before, limit: 50, on: postgres, logger: logger)
        var body = "<table id=\"audit\"><tr><th>when</th><th>operator</th><th>action</th><th>target</th><th>details</th></tr>"
        for (_, at, actor, action, target, details) in events {
            body += "<tr><td>\(HTML.time(at))</td><td>\(HTML.escape(actor))</td><td>\(HTML.escape(action))</td>"
                + "<td>\(HTML.escape(target ?? ""))</td><td><code>\(HTML.escape(details))</code></td></tr>"
        }
        body += "</table>"
        if more, let last = events.last { body += "<p><a href=\"/console/audit?cursor=\(last.id)\">Older</a></p>" }
        return HTML.response(HTML.page(title: "Audit log", session: session, body: body))
    }

    /// Identities, newest first, or those whose ID holds what was typed (`q`); a whole
    /// Whisper ID, or `whisperId`, opens that identity's page.
    private func userPage(_ request: Request, _ session: ConsoleSessions.Session) async throws -> Response {
        let query = request.uri.queryParameters
        let typed = (query["q"].map(String.init) ?? "").filter { !$0.isWhitespace }.uppercased()
        if let asked = query["whisperId"].map(String.init) ?? (Format.isWhisperID(typed) ? typed : nil) {
            return try await identityPage(asked.trimmingCharacters(in: .whitespaces).uppercased(), session)
        }
        var body = Self.userSearchForm(typed)
        guard let search = UserSearch(typed: typed, cursor: query["cursor"].map(String.init)) else {
            body += "<p>Type letters A to Z, digits 2 to 7 and dashes, as in a Whisper ID.</p>"
            return HTML.response(HTML.page(title: "Users", session: session, error: "Not part of a Whisper ID.", body: body), status: .badRequest)
        }
        let (rows, next) = try await search.page(on: postgres, logger: logger)
        body += "<p id=\"user-count\">\(rows.isEmpty ? "No identities" : "\(rows.count)\(next == nil ? "" : "+") \(rows.count == 1 ? "identity" : "identities")")"
            + (typed.isEmpty ? ", newest first" : " whose ID \(typed.hasPrefix("WSP-") ? "starts with" : "holds") \(HTML.escape(typed))") + ".</p>"
        body += "<table id=\"users\"><tr><th>Whisper ID</th><th>created</th><th>standing</th><th>active devices</th><th>last seen</th></tr>"
        for row in rows {
            body += "<tr data-whisper-id=\"\(HTML.escape(row.whisperId))\"><td><a href=\"/console/users?whisperId=\(HTML.query(row.whisperId))\">"
                + "\(HTML.escape(row.whisperId))</a></td><td>\(HTML.time(row.createdAt))</td>"
                + "<td>\(row.banned ? "<span class=\"banned\">banned</span>" : "active")</td><td>\(row.activeDevices)</td><td>\(HTML.time(row.lastSeen))</td></tr>"
        }
        body += "</table>"
        if let next {
            body += "<p><a href=\"/console/users?q=\(HTML.query(typed))&amp;cursor=\(HTML.query(next))\" id=\"older\">Older</a></p>"
        }
        return HTML.response(HTML.page(title: "Users", session: session, body: body))
    }

    private static func userSearchForm(_ typed: String) -> String {
        """
        <form method="get" action="/console/users" id="user-search"><label>Whisper ID, whole or in part <input type="text" name="q" \
        value="\(HTML.escape(typed))" maxlength="40"></label> <button type="submit">Search</button></form>
        """
    }

    /// One identity: standing, devices, when last seen, what waits for it; never content.
    private func identityPage(_ asked: String, _ session: ConsoleSessions.Session) async throws -> Response {
        var body = Self.userSearchForm(asked)
        guard Format.isWhisperID(asked) else {
            return HTML.response(HTML.page(title: "Users", session: session, error: "Not a Whisper ID (WSP-XXXX-XXXX-XXXX).", body: body), status: .badRequest)
        }
        let identity = try await postgres.query("""
            SELECT (extract(epoch FROM u.created_at) * 1000)::bigint,
                   EXISTS (SELECT 1 FROM bans b WHERE b.whisper_id = u.whisper_id AND b.lifted_at IS NULL
                           AND (b.expires_at IS NULL OR b.expires_at > now())),
                   (SELECT count(*) FROM group_members m WHERE m.whisper_id = u.whisper_id),
                   (SELECT count(*) FROM reports r WHERE r.reported_id = u.whisper_id),
                   (SELECT count(*) FROM reports r WHERE r.reporter_id = u.whisper_id)
            FROM users u WHERE u.whisper_id = \(asked)
            """, logger: logger).decode((Int64, Bool, Int64, Int64, Int64).self).first { _ in true }
        guard let (createdAt, banned, groups, reportedCount, filedCount) = identity else {
            return HTML.response(HTML.page(title: "Users", session: session, error: "No identity \(asked).", body: body), status: .notFound)
        }
        let replies = try await redis.pipeline([RedisCommand("XLEN", RedisKeys.pending(asked)), RedisCommand("EXISTS", RedisKeys.presence(asked))])
        let pending = replies.first?.int ?? 0
        let online = replies.last?.int == 1
        body += """
            <table id="identity"><tr><th>Whisper ID</th><td>\(HTML.escape(asked))</td></tr>
            <tr><th>standing</th><td id="standing">\(banned ? "<span class=\"banned\">banned</span>" : "active")</td></tr>
            <tr><th>created</th><td>\(HTML.time(createdAt))</td></tr>
            <tr><th>online now</th><td>\(online ? "yes" : "no")</td></tr>
            <tr><th>messages waiting</th><td id="pending">\(pending)</td></tr>
            <tr><th>groups</th><td>\(groups)</td></tr>
            <tr><th>reports about it / filed by it</th><td>\(reportedCount) / \(filedCount)</td></tr></table>
            <h2>Devices</h2><table id="devices"><tr><th>platform</th><th>active</th><th>registered</th><th>last seen</th><th>push</th><th>VoIP push</th></tr>
            """
        let devices = try await postgres.query("""
            SELECT platform, active, (extract(epoch FROM created_at) * 1000)::bigint, (extract(epoch FROM last_seen_at) * 1000)::bigint,
                   push_token IS NOT NULL, voip_token IS NOT NULL
            FROM devices WHERE whisper_id = \(asked) ORDER BY active DESC, last_seen_at DESC LIMIT 20
            """, logger: logger)
        for try await (platform, active, created, seen, push, voip) in devices.decode((String, Bool, Int64, Int64, Bool, Bool).self) {
            body += "<tr><td>\(HTML.escape(platform))</td><td>\(active ? "yes" : "no")</td><td>\(HTML.time(created))</td>"
                + "<td>\(HTML.time(seen))</td><td>\(push ? "registered" : "none")</td><td>\(voip ? "registered" : "none")</td></tr>"
        }
        body += "</table><h2>Bans</h2><table><tr><th>reason</th><th>by</th><th>since</th><th>until</th><th>state</th></tr>"
        let now = Clock.millisecondsNow()
        for ban in try await moderation.bans(activeOnly: false, whisperId: asked, limit: 50).0 {
            body += "<tr><td>\(HTML.escape(ban["reason"] as? String ?? ""))</td><td>\(HTML.escape(ban["bannedBy"] as? String ?? ""))</td>"
                + "<td>\(HTML.time(ban["createdAt"] as? Int64))</td><td>\(HTML.until(ban["expiresAt"] as? Int64, now: now))</td>"
                + "<td>\(HTML.escape(ban["state"] as? String ?? ""))</td></tr>"
        }
        body += "</table>"
        if !banned {
            body += "<p><a href=\"/console/bans?whisperId=\(HTML.query(asked))\">Ban this identity…</a></p>"
        }
        return HTML.response(HTML.page(title: "User \(asked)", session: session, body: body))
    }
}

/// A console form refused before anything happened: answered as a page, not JSON.
struct ConsoleRefusal: HTTPResponseError {
    let status: HTTPResponse.Status
    let message: String

    func response(from request: Request, context: some RequestContext) throws -> Response {
        let body = "<p>\(HTML.escape(message))</p><p><a href=\"/console\">Back to the console</a></p>"
        return HTML.response(HTML.page(title: "Refused", session: nil, error: message, body: body), status: status)
    }
}
