import AdminService
import GCWorkerService
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Testing
import WhisperClient
import WhisperShared

/// Bans, reports and stats through the admin API (docs/protocol.md section 12, "Admin API"), against two gateways, a
/// router and auth on real Redis and Postgres.
@Suite struct ModerationTests {
    struct Admin {
        let service: RunningService
        var baseURL: String { service.baseURL }

        func call(_ method: HTTPMethod, _ path: String, _ body: [String: Any]? = nil, token: String? = TestServers.adminToken) async throws -> (status: Int, json: [String: Any]) {
            try await HTTP.json(method, "\(baseURL)\(path)", token: token, body: body)
        }

        func auditActions() async throws -> [String] {
            let events = try await call(.GET, "/admin/audit?limit=200").json["events"] as? [[String: Any]] ?? []
            return events.reversed().map { "\($0["actor"] as? String ?? "") \($0["action"] as? String ?? "") \($0["target"] as? String ?? "")" }
        }
    }

    /// A stack and an admin service on it, stopped together.
    struct Moderated: StartedForATest {
        let stack: MessagingStack
        let admin: Admin

        func stop() async throws {
            try await stack.stop()
            try await admin.service.stop()
        }
    }

    /// The stack with caches that would outlive any test: whatever a ban changes must
    /// reach them through the change channel, not through their expiry.
    static func start(redis: RedisConfiguration? = nil) async throws -> Moderated {
        try await MessagingStack.start(routers: 1, router: { $0.identityCacheTTL = .seconds(3_600) }, redis: redis).then { stack in
            let admin = try await RunningService.start { running in
                buildAdmin(
                    settings: AdminSettings(
                        common: TestServers.common(service: "admin", postgres: stack.database, redis: stack.redis), tokens: [("ops-anna", TestServers.adminToken)]
                    ),
                    logger: TestServers.logger, onServerRunning: running
                ).assembly
            }
            return try await admin.then { admin in
                _ = try await HTTP.waitFor("\(admin.baseURL)/ready") { $0.status == 200 }
                return Moderated(stack: stack, admin: Admin(service: admin))
            }
        }
    }

    static func keyStatus(of whisperId: String, asker: TestUser, stack: MessagingStack) async throws -> String? {
        var request = HTTPClientRequest(url: "\(stack.auth.baseURL)/users/\(whisperId)/keys")
        request.headers.add(name: "Authorization", value: "Bearer \(asker.token)")
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        let bytes = try await response.body.collect(upTo: 1 << 16)
        return ((try? JSONSerialization.jsonObject(with: Data(buffer: bytes))) as? [String: Any])?["status"] as? String
    }

    /// Registers `user`'s identity again (recovery from its keys) on a new socket.
    static func recover(_ user: TestUser, on index: Int, stack: MessagingStack) async throws -> TestUser {
        let connection = WhisperConnection(url: "ws://127.0.0.1:\(stack.gateways[index].port)/ws", logger: TestServers.logger)
        try await connection.connect()
        let ack = try await connection.register(keys: user.keys, deviceId: UUID().uuidString.lowercased(), platform: .ios, whisperId: user.whisperId)
        return TestUser(whisperId: ack.whisperId, keys: user.keys, token: ack.sessionToken, connection: connection, events: EventLog(connection))
    }

    @Test func aBanClosesTheSocketOnAnotherGatewayRefusesEverythingAndUnbanRestores() async throws {
        try await Self.start().running { moderated in
            let (stack, admin) = (moderated.stack, moderated.admin)
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            // The router has both cached as not banned before the ban.
            _ = try await bob.sendAndWaitForArrival("before", to: alice)
            _ = try await alice.sendAndWaitForArrival("before", to: bob)

            // Without a valid admin token nothing happens.
            for token in [nil, "wrong-" + String(repeating: "x", count: 40)] {
                let refused = try await admin.call(.POST, "/admin/ban", ["whisperId": bob.whisperId, "reason": "spam"], token: token)
                #expect(refused.status == 401)
                #expect((refused.json["error"] as? [String: Any])?["code"] as? String == "AUTH_FAILED")
                #expect(try await admin.call(.GET, "/admin/bans", token: token).status == 401)
                #expect(try await admin.call(.POST, "/admin/unban", ["whisperId": bob.whisperId], token: token).status == 401)
                #expect(try await admin.call(.GET, "/admin/audit", token: token).status == 401)
                #expect(try await admin.call(.GET, "/admin/stats", token: token).status == 401)
                #expect(try await admin.call(.GET, "/admin/reports", token: token).status == 401)
            }
            #expect(await bob.connection.closeCode == nil)
            #expect((try await admin.call(.GET, "/admin/bans").json["bans"] as? [Any])?.isEmpty == true)
            // Bad bodies are refused by field, before anything else.
            for (body, field) in [
                (["whisperId": "WSP-nope", "reason": "spam"], "whisperId"),
                (["whisperId": bob.whisperId, "reason": ""], "reason"),
                (["whisperId": bob.whisperId, "reason": "spam", "durationSeconds": 0], "durationSeconds"),
                (["whisperId": bob.whisperId, "reason": "spam", "expiresAt": 1], "expiresAt"),
                (["whisperId": bob.whisperId, "reason": "spam", "mood": "bad"], "mood"),
            ] as [([String: Any], String)] {
                let refused = try await admin.call(.POST, "/admin/ban", body)
                #expect(refused.status == 400, "\(field)")
                #expect(((refused.json["error"] as? [String: Any])?["message"] as? String)?.contains(field) == true, "\(field)")
            }
            #expect(try await admin.call(.POST, "/admin/ban", ["whisperId": "WSP-AAAA-AAAA-AAAA", "reason": "spam"]).status == 404)

            let banned = try await admin.call(.POST, "/admin/ban", ["whisperId": bob.whisperId, "reason": "spam waves"])
            #expect(banned.status == 200)
            #expect(banned.json["endedSession"] as? Bool == true)
            #expect((banned.json["ban"] as? [String: Any])?["state"] as? String == "active")

            // Bob's socket, on the other gateway, is told and closed.
            let revoked = try await bob.events(.sessionRevoked).first?.payload(as: SessionRevoked.self)
            #expect(revoked == SessionRevoked(reason: .banned))
            try await waitUntil { await bob.connection.closeCode != nil }
            #expect(await bob.connection.closeCode == .some(4001))
            // His token is gone, on any gateway; recovery is refused with USER_BANNED.
            let stale = try await stack.reconnect(bob, on: 0)
            await expectRefused(.notRegistered, "banned session") { _ = try await stale.connection.refreshSession() }
            await expectRefused(.userBanned, "registration while banned") { _ = try await Self.recover(bob, on: 0, stack: stack) }
            // Messages to him are refused (the router dropped its cached standing at once).
            await expectRefused(.forbidden, "message to a banned identity") { _ = try await alice.connection.send(alice.message("hi", to: bob)) }
            #expect(try await Self.keyStatus(of: bob.whisperId, asker: alice, stack: stack) == "banned")
            let bans = try await admin.call(.GET, "/admin/bans").json["bans"] as? [[String: Any]] ?? []
            #expect(bans.map { $0["whisperId"] as? String } == [bob.whisperId])
            #expect(bans.first?["bannedBy"] as? String == "ops-anna")
            #expect(bans.first?["reason"] as? String == "spam waves")

            // Unban: everything works again.
            #expect(try await admin.call(.POST, "/admin/unban", ["whisperId": alice.whisperId]).status == 404)
            let lifted = try await admin.call(.POST, "/admin/unban", ["whisperId": bob.whisperId, "note": "appeal granted"])
            #expect(lifted.status == 200)
            #expect((lifted.json["ban"] as? [String: Any])?["state"] as? String == "lifted")
            #expect((try await admin.call(.GET, "/admin/bans").json["bans"] as? [Any])?.isEmpty == true)
            #expect((try await admin.call(.GET, "/admin/bans?state=all").json["bans"] as? [Any])?.count == 1)
            let back = try await Self.recover(bob, on: 0, stack: stack)
            #expect(back.whisperId == bob.whisperId)
            _ = try await alice.sendAndWaitForArrival("welcome back", to: back)
            let fromBob = back.message("thanks", to: alice)
            _ = try await back.connection.send(fromBob)
            try await waitUntil { try await alice.events.all(.messageReceived).contains { $0.payload(as: MessageReceived.self)?.messageId == fromBob.messageId } }
            #expect(try await Self.keyStatus(of: bob.whisperId, asker: alice, stack: stack) == "active")

            #expect(try await admin.auditActions() == ["ops-anna ban \(bob.whisperId)", "ops-anna unban \(bob.whisperId)"])
        }
    }

    @Test func aBanWithAnExpiryEndsByItself() async throws {
        try await Self.start().running { moderated in
            let (stack, admin) = (moderated.stack, moderated.admin)
            let alice = try await stack.user(on: 0)
            let carol = try await stack.user(on: 0)
            let banned = try await admin.call(.POST, "/admin/ban", ["whisperId": carol.whisperId, "reason": "cool-off", "durationSeconds": 2])
            #expect(banned.status == 200)
            let ban = try #require(banned.json["ban"] as? [String: Any])
            let expiresAt = try #require(ban["expiresAt"] as? Int64)
            try await waitUntil { await carol.connection.closeCode != nil }
            // While it lasts, the router learns it (and keeps it no longer than the ban).
            await expectRefused(.forbidden, "message to a banned identity") { _ = try await alice.connection.send(alice.message("hi", to: carol)) }
            // Without anyone lifting it, it ends: listed as expired, registration works again.
            try await waitUntil { Clock.millisecondsNow() > expiresAt }
            let all = try await admin.call(.GET, "/admin/bans?state=all").json["bans"] as? [[String: Any]] ?? []
            #expect(all.first?["state"] as? String == "expired")
            #expect((try await admin.call(.GET, "/admin/bans").json["bans"] as? [Any])?.isEmpty == true)
            let back = try await Self.recover(carol, on: 1, stack: stack)
            _ = try await alice.sendAndWaitForArrival("it passed", to: back)
            // A new ban after an expired one is recorded (the expired one kept as history).
            #expect(try await admin.call(.POST, "/admin/ban", ["whisperId": carol.whisperId, "reason": "again"]).status == 200)
            #expect((try await admin.call(.GET, "/admin/bans?state=all").json["bans"] as? [Any])?.count == 2)
        }
    }

    @Test func aReportOverTheSocketIsListedGroupedAndReviewed() async throws {
        try await Self.start().running { moderated in
            let (stack, admin) = (moderated.stack, moderated.admin)
            let alice = try await stack.user(on: 0)
            let dave = try await stack.user(on: 1)
            let bob = try await stack.user(on: 1)
            let message = try await bob.sendAndWaitForArrival("buy cheap watches", to: alice)

            let report = ReportUser(sessionToken: alice.token, .init(whisperId: bob.whisperId, reason: .spam, details: "watches", messageId: message.sent.messageId))
            let accepted = try #require(try await alice.connection.request(report).payload(as: ReportAccepted.self))
            #expect(Format.isUUID(accepted.reportId))
            // The same reporter again: the open report grows, no second one.
            let extra = RandomID.uuid()
            let again = ReportUser(sessionToken: alice.token, .init(whisperId: bob.whisperId, reason: .spam, messageIds: [message.sent.messageId, extra]))
            #expect(try await alice.connection.request(again).payload(as: ReportAccepted.self)?.reportId == accepted.reportId)
            _ = try await dave.connection.request(ReportUser(sessionToken: dave.token, .init(whisperId: bob.whisperId, reason: .abuse)))
            _ = try await bob.connection.request(ReportUser(sessionToken: bob.token, .init(whisperId: dave.whisperId, reason: .other, details: "retaliation")))
            // Refused: oneself, an unknown identity, too many messages.
            await expectRefused(.invalidPayload, "self") { _ = try await alice.connection.request(ReportUser(sessionToken: alice.token, .init(whisperId: alice.whisperId, reason: .spam))) }
            await expectRefused(.notFound, "unknown") { _ = try await alice.connection.request(ReportUser(sessionToken: alice.token, .init(whisperId: "WSP-AAAA-AAAA-AAAA", reason: .spam))) }
            await expectRefused(.invalidPayload, "21 messages") {
                _ = try await alice.connection.request(ReportUser(
                    sessionToken: alice.token, .init(whisperId: dave.whisperId, reason: .spam, messageIds: (0...20).map { _ in RandomID.uuid() })
                ))
            }

            #expect(try await admin.call(.GET, "/admin/reports", token: nil).status == 401)
            let open = try await admin.call(.GET, "/admin/reports")
            #expect(open.status == 200)
            let groups = open.json["reports"] as? [[String: Any]] ?? []
            // Most recently reported first: dave (reported last), then bob with both reports.
            #expect(groups.map { $0["whisperId"] as? String } == [dave.whisperId, bob.whisperId])
            let bobGroup = try #require(groups.last)
            #expect(bobGroup["reportCount"] as? Int == 2)
            #expect(bobGroup["reasons"] as? [String: Int] == ["spam": 1, "abuse": 1])
            #expect(bobGroup["banned"] as? Bool == false)
            let bobReports = bobGroup["reports"] as? [[String: Any]] ?? []
            let alicesReport = try #require(bobReports.first { $0["id"] as? String == accepted.reportId })
            #expect(alicesReport["reporterId"] as? String == alice.whisperId)
            #expect(alicesReport["messageIds"] as? [String] == [message.sent.messageId, extra])
            #expect(alicesReport["details"] as? String == "watches")

            // Paging: one identity a page.
            let first = try await admin.call(.GET, "/admin/reports?limit=1")
            let cursor = try #require(first.json["nextCursor"] as? String)
            let second = try await admin.call(.GET, "/admin/reports?limit=1&cursor=\(cursor)")
            #expect((second.json["reports"] as? [[String: Any]])?.first?["whisperId"] as? String == bob.whisperId)
            #expect(second.json["nextCursor"] == nil)

            // Review: once; then it leaves the open list and shows under its decision.
            #expect(try await admin.call(.POST, "/admin/reports/\(accepted.reportId)/review", ["decision": "maybe"]).status == 400)
            #expect(try await admin.call(.POST, "/admin/reports/\(RandomID.uuid())/review", ["decision": "dismissed"]).status == 404)
            #expect(try await admin.call(.POST, "/admin/reports/\(accepted.reportId)/review", ["decision": "dismissed"], token: nil).status == 401)
            let reviewed = try await admin.call(.POST, "/admin/reports/\(accepted.reportId)/review", ["decision": "actioned", "note": "warned"])
            #expect(reviewed.status == 200)
            #expect(reviewed.json["status"] as? String == "actioned")
            #expect(reviewed.json["reviewedBy"] as? String == "ops-anna")
            #expect(try await admin.call(.POST, "/admin/reports/\(accepted.reportId)/review", ["decision": "dismissed"]).status == 403)
            let stillOpen = try await admin.call(.GET, "/admin/reports").json["reports"] as? [[String: Any]] ?? []
            #expect(stillOpen.first { $0["whisperId"] as? String == bob.whisperId }?["reportCount"] as? Int == 1)
            let actioned = try await admin.call(.GET, "/admin/reports?status=actioned").json["reports"] as? [[String: Any]] ?? []
            #expect(actioned.map { $0["whisperId"] as? String } == [bob.whisperId])
            #expect(try await admin.auditActions() == ["ops-anna report.review \(accepted.reportId)"])
            // A report after the first review opens a new one.
            let later = try #require(try await alice.connection.request(ReportUser(sessionToken: alice.token, .init(whisperId: bob.whisperId, reason: .spam))).payload(as: ReportAccepted.self))
            #expect(later.reportId != accepted.reportId)
        }
    }

    @Test func statsCountIdentitiesConnectionsAndPendingMessages() async throws {
        try await Self.start().running { moderated in
            let (stack, admin) = (moderated.stack, moderated.admin)
            #expect(try await admin.call(.GET, "/admin/stats", token: nil).status == 401)
            let alice = try await stack.user(on: 0)
            let bob = try await stack.offlineUser(on: 1)
            _ = try await alice.connection.send(alice.message("one", to: bob))
            _ = try await alice.connection.send(alice.message("two", to: bob))
            try await waitUntil { try await stack.pendingDepth(bob.whisperId) == 2 }
            // gc-worker takes the census of the pending queues (its first one at its start).
            try await RunningService.start { running in
                buildGCWorker(
                    settings: GCWorkerSettings(
                        common: TestServers.common(service: "gc-worker", postgres: stack.database, redis: stack.redis),
                        s3: TestServers.s3Settings(port: 9), directorySigner: TestServers.directorySigner, journalKeys: TestServers.journalKeys, interval: .seconds(3_600)
                    ),
                    logger: TestServers.logger, onServerRunning: running
                ).assembly
            }.running { worker in
                try await waitUntil {
                    ((try await admin.call(.GET, "/admin/stats").json["pending"] as? [String: Any])?["messages"] as? Int) == 2
                }
                _ = try await HTTP.waitFor("\(worker.baseURL)/metrics") { $0.body.contains("whisper_pending_messages 2") }
                let sample = try #require(try await stack.withRedis { try await PendingCensus.latest(on: $0) })
                #expect(sample.queues == 1)

                let stats = try await admin.call(.GET, "/admin/stats")
                #expect(stats.status == 200)
                #expect(stats.json["identities"] as? Int == 2)
                #expect((stats.json["pending"] as? [String: Any])?["messages"] as? Int == 2)
                #expect((stats.json["devices"] as? [String: Any])?["active"] as? Int == 2)
                let connections = try #require(stats.json["connections"] as? [String: Any])
                // Both gateways report themselves from their start.
                #expect((connections["gateways"] as? [Any])?.count == 2)
            }
        }
    }
}
