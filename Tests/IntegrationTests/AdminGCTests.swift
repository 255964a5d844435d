import AdminService
import AsyncHTTPClient
import Foundation
import GCWorkerService
import NIOCore
import NIOHTTP1
import Testing
import WhisperShared

/// An operator's GC run: `POST /admin/attachments/gc/run` with an admin token, carried
/// out by a gc-worker, its outcome readable, the request in the audit log.
@Suite struct AdminGCTests {
    static func call(_ method: HTTPMethod, _ url: String, token: String?) async throws -> (status: Int, json: [String: Any]) {
        var request = HTTPClientRequest(url: url)
        request.method = method
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        let bytes = try await response.body.collect(upTo: 1 << 20)
        return (Int(response.status.code), (try? JSONSerialization.jsonObject(with: Data(buffer: bytes))) as? [String: Any] ?? [:])
    }

    @Test func anOperatorsRunDeletesWhatMayGoAndIsAuditedWhileStrangersChangeNothing() async throws {
        let moto = try MotoProcess()
        defer { moto.stop() }
        let store = try await moto.client()
        try await MessagingStack.start(routers: 1).running { stack in
            let common = { (service: String) in TestServers.common(service: service, postgres: stack.database, redis: stack.redis) }
            try await RunningService.start { running in
                buildAdmin(settings: AdminSettings(common: common("admin"), tokens: [("ops-anna", TestServers.adminToken)]), logger: TestServers.logger, onServerRunning: running).assembly
            }.running { admin in
                try await RunningService.start { running in
                    buildGCWorker(settings: GCWorkerSettings(common: common("gc-worker"), s3: moto.settings, directorySigner: TestServers.directorySigner, journalKeys: TestServers.journalKeys, interval: .seconds(3_600)), logger: TestServers.logger, onServerRunning: running).assembly
                }.running { worker in
                    for service in [admin, worker] { _ = try await HTTP.waitFor("\(service.baseURL)/ready") { $0.status == 200 } }
                    // The worker's own first run is over before the test's attachment exists.
                    _ = try await HTTP.waitFor("\(worker.baseURL)/metrics") { $0.body.contains("whisper_gc_runs_total 1") }

                    let alice = try await stack.user(on: 0)
                    let objectKey = "att/2026/11/\(RandomID.uuid()).bin"
                    try await stack.withPostgres { postgres in
                        try await postgres.query("""
                            INSERT INTO attachments (object_key, uploader_id, content_type, size_bytes, purpose, expires_at)
                            VALUES (\(objectKey), \(alice.whisperId), 'image/jpeg', 64, 'message_attachment', now() - interval '1 hour')
                            """)
                    }
                    try await store.put(objectKey, body: SecureBytes.random(64), contentType: "application/octet-stream")

                    let url = "\(admin.baseURL)/admin/attachments/gc/run"
                    for token in [nil, "wrong-token-" + String(repeating: "x", count: 32)] {
                        let refused = try await Self.call(.POST, url, token: token)
                        #expect(refused.status == 401)
                        #expect((refused.json["error"] as? [String: Any])?["code"] as? String == "AUTH_FAILED")
                    }
                    let queued = try await stack.withRedis { try await $0.send("LLEN", GCRuns.requestsKey).int }
                    #expect(queued == 0)
                    #expect(try await store.head(objectKey) != nil)

                    let accepted = try await Self.call(.POST, url, token: TestServers.adminToken)
                    #expect(accepted.status == 202)
                    let jobId = try #require(accepted.json["jobId"] as? String)
                    var run: [String: Any] = [:]
                    try await waitUntil(timeout: .seconds(20)) {
                        run = try await Self.call(.GET, "\(admin.baseURL)/admin/attachments/gc/runs/\(jobId)", token: TestServers.adminToken).json
                        return run["state"] as? String == "done"
                    }
                    #expect(run["deleted"] as? Int == 1)
                    #expect(run["requestedBy"] as? String == "ops-anna")
                    #expect(try await store.head(objectKey) == nil)
                    #expect(try await Self.call(.GET, "\(admin.baseURL)/admin/attachments/gc/runs/\(jobId)", token: nil).status == 401)
                    #expect(try await Self.call(.GET, "\(admin.baseURL)/admin/attachments/gc/runs/\(RandomID.uuid())", token: TestServers.adminToken).status == 404)

                    let audit = try await stack.withPostgres { postgres in
                        var rows: [(String, String, String?)] = []
                        for try await row in try await postgres.query("SELECT actor, action, target FROM audit_events").decode((String, String, String?).self) {
                            rows.append(row)
                        }
                        return rows.map { "\($0.0) \($0.1) \($0.2 ?? "")" }
                    }
                    #expect(audit == ["ops-anna attachments.gc.run \(jobId)"])
                    // The same through the API, newest first, a page at a time.
                    let second = try await Self.call(.POST, url, token: TestServers.adminToken)
                    let secondJob = try #require(second.json["jobId"] as? String)
                    let page = try await Self.call(.GET, "\(admin.baseURL)/admin/audit?limit=1", token: TestServers.adminToken)
                    let newest = try #require((page.json["events"] as? [[String: Any]])?.first)
                    #expect(newest["target"] as? String == secondJob && newest["actor"] as? String == "ops-anna")
                    let cursor = try #require(page.json["nextCursor"] as? String)
                    let next = try await Self.call(.GET, "\(admin.baseURL)/admin/audit?limit=1&cursor=\(cursor)", token: TestServers.adminToken)
                    let older = try #require((next.json["events"] as? [[String: Any]])?.first)
                    #expect(older["target"] as? String == jobId && older["action"] as? String == "attachments.gc.run")
                    #expect(next.json["nextCursor"] == nil)
                    #expect(try await Self.call(.GET, "\(admin.baseURL)/admin/audit", token: nil).status == 401)
                    #expect(try await Self.call(.GET, "\(admin.baseURL)/admin/audit?limit=0", token: TestServers.adminToken).status == 400)

                }
            }
        }
    }
}
