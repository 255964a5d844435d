@testable import AdminService
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Testing
import WhisperClient
import WhisperShared

/// The operator console: in headless Chromium (Tests/Console/console_flow.py, Playwright
/// on Debian's chromium) against a real stack, and its refusals over plain HTTP.
@Suite struct ConsoleTests {
    static let chromium = TestServers.environment["WHISPER_TEST_CHROMIUM"] ?? "/usr/bin/chromium"
    static let artifacts = TestServers.environment["WHISPER_TEST_ARTIFACTS"]
        ?? TestServers.repoRoot.appendingPathComponent(".build/test-artifacts").path

    @Test func anOperatorBansAReportedUserFromTheConsoleInABrowser() async throws {
        try await ModerationTests.start().running { moderated in
            let (stack, admin) = (moderated.stack, moderated.admin)
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            _ = try await alice.connection.request(ReportUser(sessionToken: alice.token, .init(whisperId: bob.whisperId, reason: .spam, details: "links")))

            let directory = "\(Self.artifacts)/console"
            try? FileManager.default.removeItem(atPath: directory)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = [
                MotoProcess.python, TestServers.repoRoot.appendingPathComponent("Tests/Console/console_flow.py").path,
                "--base", admin.baseURL, "--token", TestServers.adminToken, "--operator", "ops-anna", "--target", bob.whisperId,
                "--artifacts", directory, "--chromium", Self.chromium,
            ]
            let output = Pipe()
            process.standardOutput = output
            process.standardError = output
            try process.run()
            let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            #expect(process.terminationStatus == 0, "console_flow.py: \(text)")
            let summary = text.split(separator: "\n").last.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) } as? [String: Any]
            #expect(summary?["steps"] as? [String] == [
                "sign-in", "wrong-token", "figures", "reports", "confirm-ban", "banned", "audit", "users", "user", "confirm-lift", "lifted",
            ])
            // Every step left its screenshot.
            let shots = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
            #expect(shots.filter { $0.hasSuffix(".png") }.count == 11)

            // The ban made on the page took effect like one made through the API: bob's
            // socket, on the other gateway, was told and closed.
            let revoked = try await bob.events(.sessionRevoked).first?.payload(as: SessionRevoked.self)
            #expect(revoked == SessionRevoked(reason: .banned))
            try await waitUntil { await bob.connection.closeCode != nil }
            #expect(try await admin.auditActions() == [
                "ops-anna report.review \(try #require(try await Self.reportId(of: bob, stack: stack)))",
                "ops-anna ban \(bob.whisperId)", "ops-anna unban \(bob.whisperId)",
            ])
        }
    }

    /// A client that shows redirects instead of following them (kept for the process:
    /// shut down at exit like `HTTPClient.shared`).
    static let noRedirects = HTTPClient(
        eventLoopGroupProvider: .singleton, configuration: HTTPClient.Configuration(redirectConfiguration: .disallow)
    )

    static func reportId(of reported: TestUser, stack: MessagingStack) async throws -> String? {
        try await stack.withPostgres { postgres in
            try await postgres.query("SELECT id::text FROM reports WHERE reported_id = \(reported.whisperId)").decode(String.self).first { _ in true }
        }
    }

    static func request(_ method: HTTPMethod, _ url: String, form: String? = nil, cookie: String? = nil, origin: String? = nil) async throws -> HTTPClientResponse {
        var request = HTTPClientRequest(url: url)
        request.method = method
        if let cookie { request.headers.add(name: "Cookie", value: cookie) }
        if let origin { request.headers.add(name: "Origin", value: origin) }
        if let form {
            request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
            request.body = .bytes(ByteBuffer(string: form))
        }
        return try await noRedirects.execute(request, timeout: .seconds(10))
    }

    /// The cookie a response sets (`name=value`), and the whole header.
    static func setCookie(_ response: HTTPClientResponse, _ name: String) -> (pair: String, header: String)? {
        for header in response.headers["Set-Cookie"] where header.hasPrefix("\(name)=") {
            return (String(header.split(separator: ";")[0]), header)
        }
        return nil
    }

    @Test func formsNeedASessionAndItsCSRFTokenAndPagesAreLockedDown() async throws {
        try await ModerationTests.start().running { moderated in
            let (stack, admin) = (moderated.stack, moderated.admin)
            let bob = try await stack.user(on: 1)
            let base = admin.baseURL

            // Not signed in: pages send to sign-in, forms are refused and change nothing.
            let page = try await Self.request(.GET, "\(base)/console/bans")
            #expect(page.status == .seeOther)
            #expect(page.headers.first(name: "Location") == "/console/login")
            let anonymous = try await Self.request(.POST, "\(base)/console/ban", form: "whisperId=\(bob.whisperId)&reason=x")
            #expect(anonymous.status == .forbidden)

            // Sign-in needs the nonce of its own form.
            let form = try await Self.request(.GET, "\(base)/console/login")
            #expect(form.status == .ok)
            #expect(form.headers.first(name: "Content-Security-Policy")?.contains("default-src 'none'") == true)
            #expect(form.headers.first(name: "X-Frame-Options") == "DENY")
            #expect(form.headers.first(name: "Cache-Control") == "no-store")
            let login = try #require(Self.setCookie(form, "whisper_console_login"))
            #expect(login.header.contains("HttpOnly") && login.header.contains("SameSite=Strict"))
            let nonce = String(login.pair.dropFirst("whisper_console_login=".count))
            let token = TestServers.adminToken.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
            #expect(try await Self.request(.POST, "\(base)/console/login", form: "csrf=other&token=\(token)", cookie: login.pair).status == .forbidden)
            #expect(try await Self.request(.POST, "\(base)/console/login", form: "csrf=\(nonce)&token=wrong", cookie: login.pair).status == .unauthorized)
            let signedIn = try await Self.request(.POST, "\(base)/console/login", form: "csrf=\(nonce)&token=\(token)", cookie: login.pair)
            #expect(signedIn.status == .seeOther)
            let session = try #require(Self.setCookie(signedIn, "whisper_console"))
            #expect(session.header.contains("HttpOnly") && session.header.contains("SameSite=Strict") && session.header.contains("Path=/console"))
            // The cookie's id is not what Redis keeps.
            let id = String(session.pair.dropFirst("whisper_console=".count))
            let keys = try await stack.withRedis { try await $0.send("KEYS", "console:*").array?.compactMap(\.string) ?? [] }
            #expect(keys.count == 1)
            #expect(!keys.contains { $0.contains(id) })

            // Signed in: the page carries the CSRF token; a form without it, with another,
            // or from another origin changes nothing.
            let bans = try await Self.request(.GET, "\(base)/console/bans", cookie: session.pair)
            let html = String(buffer: try await bans.body.collect(upTo: 1 << 20))
            let csrf = try #require(html.components(separatedBy: "name=\"csrf\" value=\"").dropFirst().first?.split(separator: "\"").first.map(String.init))
            let ban = "whisperId=\(bob.whisperId)&reason=spam"
            #expect(try await Self.request(.POST, "\(base)/console/ban", form: ban, cookie: session.pair).status == .forbidden)
            #expect(try await Self.request(.POST, "\(base)/console/ban", form: ban + "&csrf=forged", cookie: session.pair).status == .forbidden)
            #expect(try await Self.request(.POST, "\(base)/console/ban", form: ban + "&csrf=\(csrf)", cookie: session.pair, origin: "http://evil.example").status == .forbidden)
            #expect((try await admin.call(.GET, "/admin/bans").json["bans"] as? [Any])?.isEmpty == true)
            #expect(await bob.connection.closeCode == nil)
            // With it, the console asks first (and bans nothing); confirmed, the ban
            // happens. Markup in what an operator typed comes back escaped.
            let ban2 = "whisperId=\(bob.whisperId)&reason=%3Cscript%3Ex%3C%2Fscript%3E&csrf=\(csrf)"
            let asked = try await Self.request(.POST, "\(base)/console/ban", form: ban2, cookie: session.pair)
            #expect(asked.status == .ok)
            let question = String(buffer: try await asked.body.collect(upTo: 1 << 20))
            #expect(question.contains("name=\"confirmed\" value=\"yes\"") && question.contains("until lifted"))
            #expect(question.contains("&lt;script&gt;x&lt;/script&gt;") && !question.contains("<script>"))
            #expect((try await admin.call(.GET, "/admin/bans").json["bans"] as? [Any])?.isEmpty == true)
            let done = try await Self.request(.POST, "\(base)/console/ban", form: ban2 + "&confirmed=yes", cookie: session.pair)
            #expect(done.status == .seeOther)
            try await waitUntil { await bob.connection.closeCode != nil }
            let listed = String(buffer: try await Self.request(.GET, "\(base)/console/bans", cookie: session.pair).body.collect(upTo: 1 << 20))
            #expect(listed.contains("&lt;script&gt;x&lt;/script&gt;"))
            #expect(!listed.contains("<script>"))
            // A bad Whisper ID is answered on the page, with the code's status.
            let bad = try await Self.request(.POST, "\(base)/console/ban", form: "whisperId=nope&reason=x&csrf=\(csrf)", cookie: session.pair)
            #expect(bad.status == .badRequest)
            // Signing out ends the session in Redis too.
            #expect(try await Self.request(.POST, "\(base)/console/logout", form: "csrf=\(csrf)", cookie: session.pair).status == .seeOther)
            #expect(try await Self.request(.GET, "\(base)/console", cookie: session.pair).status == .seeOther)
            #expect(try await stack.withRedis { try await $0.send("KEYS", "console:*").array?.count } == 0)
        }
    }

    /// A console session's cookie (`whisper_console=…`) and its CSRF token.
    static func signedIn(_ base: String) async throws -> (cookie: String, csrf: String) {
        let form = try await request(.GET, "\(base)/console/login")
        let login = try #require(setCookie(form, "whisper_console_login"))
        let nonce = String(login.pair.dropFirst("whisper_console_login=".count))
        let token = TestServers.adminToken.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
        let session = try #require(setCookie(try await request(.POST, "\(base)/console/login", form: "csrf=\(nonce)&token=\(token)", cookie: login.pair), "whisper_console"))
        let html = String(buffer: try await request(.GET, "\(base)/console/bans", cookie: session.pair).body.collect(upTo: 1 << 20))
        let csrf = try #require(html.components(separatedBy: "name=\"csrf\" value=\"").dropFirst().first?.split(separator: "\"").first.map(String.init))
        return (session.pair, csrf)
    }

    /// The Whisper IDs a console users page lists, in order, and its `Older` link.
    static func listed(_ base: String, _ path: String, cookie: String) async throws -> (status: HTTPResponseStatus, ids: [String], older: String?) {
        let response = try await request(.GET, "\(base)\(path)", cookie: cookie)
        let html = String(buffer: try await response.body.collect(upTo: 1 << 22))
        let ids = html.components(separatedBy: "<tr data-whisper-id=\"").dropFirst().compactMap { $0.split(separator: "\"").first.map(String.init) }
        let older = html.components(separatedBy: "id=\"older\"").count > 1
            ? html.components(separatedBy: "<a href=\"").last { $0.contains("id=\"older\"") }?.split(separator: "\"").first.map { $0.replacingOccurrences(of: "&amp;", with: "&") }
            : nil
        return (response.status, ids, older)
    }

    /// The users page lists every identity newest first, 50 a page, each page taking up
    /// where the last ended; a search by the start of an ID or a piece of its middle finds
    /// exactly the IDs that hold it; input that cannot be part of an ID is refused.
    @Test func theUsersListPagesNewestFirstAndFindsIDsByAPart() async throws {
        try await ModerationTests.start().running { moderated in
            let (stack, base) = (moderated.stack, moderated.admin.baseURL)
            // 120 identities, 60 of them created in one and the same microsecond (the
            // cursor must order by ID within it).
            let start: Int64 = 1_760_000_000_000_000
            let made = (0..<120).map { index in (id: WhisperID.generate(), micros: index < 60 ? start : start + Int64(index) * 1_000) }
            try await stack.withPostgres { postgres in
                for (id, micros) in made {
                    try await postgres.query("""
                        INSERT INTO users (whisper_id, enc_public_key, sign_public_key, created_at)
                        VALUES (\(id), \(Data(SecureBytes.random(32))), \(Data(SecureBytes.random(32))), 'epoch'::timestamptz + \(micros) * interval '1 microsecond')
                        """)
                }
            }
            let expected = made.sorted { ($0.micros, $0.id) > ($1.micros, $1.id) }.map(\.id)
            let (cookie, _) = try await Self.signedIn(base)
            var seen: [String] = []
            var path: String? = "/console/users"
            var pages = 0
            while let next = path {
                let page = try await Self.listed(base, next, cookie: cookie)
                #expect(page.status == .ok)
                #expect(page.ids.count <= UserSearch.pageSize)
                seen += page.ids
                path = page.older
                pages += 1
                if pages > 10 { break }
            }
            #expect(seen == expected, "the pages listed \(seen.count) identities, \(Set(seen).count) distinct")
            #expect(pages == 3)
            // By the start of an ID, and by a piece of its middle (letter case aside).
            let target = expected[70]
            for piece in [String(target.prefix(9)), String(target.dropFirst(9).prefix(4)).lowercased()] {
                let found = try await Self.listed(base, "/console/users?q=\(piece)", cookie: cookie)
                #expect(found.status == .ok)
                #expect(found.ids.contains(target))
                #expect(found.ids == expected.filter { $0.contains(piece.uppercased()) }, "\(piece)")
            }
            // A whole ID opens its page; what cannot be part of an ID is refused.
            let whole = try await Self.request(.GET, "\(base)/console/users?q=\(target.lowercased())", cookie: cookie)
            #expect(String(buffer: try await whole.body.collect(upTo: 1 << 20)).contains("id=\"standing\""))
            let bad = try await Self.listed(base, "/console/users?q=%25%27", cookie: cookie)
            #expect(bad.status == .badRequest && bad.ids.isEmpty)
        }
    }

    /// Item 10 of issue 34: anyone who reaches the sign-in page can spend the bucket of
    /// failed attempts, but a valid token still signs in.
    @Test func failedSignInsCannotLockOperatorsOut() async throws {
        try await ModerationTests.start().running { moderated in
            let admin = moderated.admin
            let base = admin.baseURL
            let form = try await Self.request(.GET, "\(base)/console/login")
            let login = try #require(Self.setCookie(form, "whisper_console_login"))
            let nonce = String(login.pair.dropFirst("whisper_console_login=".count))
            var statuses: [HTTPResponseStatus] = []
            for attempt in 0...Limit.consoleSignInFailures.standard.capacity {
                let wrong = "csrf=\(nonce)&token=wrong-\(attempt)"
                statuses.append(try await Self.request(.POST, "\(base)/console/login", form: wrong, cookie: login.pair).status)
            }
            #expect(statuses.first == .unauthorized)
            #expect(statuses.last == .tooManyRequests)
            let token = TestServers.adminToken.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
            let signedIn = try await Self.request(.POST, "\(base)/console/login", form: "csrf=\(nonce)&token=\(token)", cookie: login.pair)
            #expect(signedIn.status == .seeOther)
            #expect(Self.setCookie(signedIn, "whisper_console") != nil)
        }
    }
}
