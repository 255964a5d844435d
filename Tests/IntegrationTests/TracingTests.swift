import Foundation
import Hummingbird
import Logging
import Synchronization
import Testing
import WhisperClient
import WhisperShared

/// One trace follows a message from the sender's gateway to the recipient's gateway,
/// through a router for a group copy (which goes through the router stream): the real
/// executables, exporting over OTLP/HTTP (JSON) to a collector stand-in that keeps what
/// it is sent.
@Suite struct TracingTests {
    /// Spans received at `POST /v1/traces`, flattened: service, name, trace, span, parent.
    final class Collector: Sendable {
        struct Received: Sendable, Equatable {
            var service: String
            var name: String
            var traceId: String
            var spanId: String
            var parentSpanId: String
        }

        let spans = Mutex<[Received]>([])

        func add(_ body: Data) {
            guard let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any] else { return }
            var found: [Received] = []
            for resource in object["resourceSpans"] as? [[String: Any]] ?? [] {
                let attributes = (resource["resource"] as? [String: Any])?["attributes"] as? [[String: Any]] ?? []
                let service = attributes.first { $0["key"] as? String == "service.name" }
                    .flatMap { ($0["value"] as? [String: Any])?["stringValue"] as? String } ?? ""
                for scope in resource["scopeSpans"] as? [[String: Any]] ?? [] {
                    for span in scope["spans"] as? [[String: Any]] ?? [] {
                        found.append(Received(
                            service: service, name: span["name"] as? String ?? "", traceId: span["traceId"] as? String ?? "",
                            spanId: span["spanId"] as? String ?? "", parentSpanId: span["parentSpanId"] as? String ?? ""
                        ))
                    }
                }
            }
            spans.withLock { $0 += found }
        }
    }

    @Test func oneTraceFollowsAMessageFromGatewayThroughRouterToTheRecipientsGateway() async throws {
        let collector = Collector()
        let router = Router()
        router.post("/v1/traces") { request, _ -> Response in
            let body = try await request.body.collect(upTo: 16 << 20)
            collector.add(Data(buffer: body))
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: "{}")))
        }
        try await RunningService.serving(router).running { collectorServer in
            let collectorPort = collectorServer.port

            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("whisper-traces-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let redisServer = try RedisProcess()
            try redisServer.start()
            let database = try await TestDatabases.shared.make()
            defer { TestDatabases.shared.release(database) }
            var environment = Executables.environment(database)
            environment["WHISPER_REDIS_URL"] = redisServer.url
            environment["WHISPER_LOG_LEVEL"] = "info"
            environment["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:\(collectorPort)"
            environment["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/json"
            environment["OTEL_BSP_SCHEDULE_DELAY"] = "100"
            let authInternal = try TestServers.freePort()
            environment["AUTH_INTERNAL_HTTP_PORT"] = "\(authInternal)"
            environment["GATEWAY_AUTH_URL"] = "http://127.0.0.1:\(authInternal)"
            var services: [ProcessStack.Running] = []
            defer { for service in services where service.process.isRunning { service.process.terminate() } }
            for name in ["auth", "router", "gateway", "gateway"] {
                var own = environment
                own["\(name.uppercased())_HTTP_PORT"] = "\(try TestServers.freePort())"
                own["WHISPER_INSTANCE_ID"] = "\(name)-\(services.count)"
                let folder = directory.appendingPathComponent("\(services.count)")
                try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
                let service = try ProcessStack.launch(name, environment: own, in: folder)
                services.append(service)
                _ = try await HTTP.waitFor("\(service.baseURL)/ready") { $0.status == 200 }
            }

            func user(on port: Int) async throws -> TestUser {
                let keys = try WhisperKeys(mnemonic: BIP39.generateMnemonic())
                let connection = WhisperConnection(url: "ws://127.0.0.1:\(port)/ws", logger: TestServers.logger)
                try await connection.connect()
                let ack = try await connection.register(keys: keys, deviceId: RandomID.uuid(), platform: .ios)
                return TestUser(whisperId: ack.whisperId, keys: keys, token: ack.sessionToken, connection: connection, events: EventLog(connection))
            }
            let alice = try await user(on: services[2].port)
            let bob = try await user(on: services[3].port)
            let (sent, _) = try await alice.sendAndWaitForArrival("traced", to: bob)
            // A group copy back: through the router stream.
            try await TestServers.withRedis(try #require(RedisConfiguration(url: redisServer.url))) {
                try await MessagingStack.makePeers([alice.whisperId, bob.whisperId], on: $0)
            }
            let created = try await bob.connection.createGroup(title: "Traced", memberIds: [alice.whisperId])
            let answer = bob.copy("traced back", to: alice, in: created.groupId)
            _ = try await bob.connection.send(answer)
            try await waitUntil {
                await alice.events.all(.messageReceived).contains { $0.payload(as: MessageReceived.self)?.messageId == answer.messageId }
            }
            #expect(!sent.messageId.isEmpty && !answer.messageId.isEmpty)

            // Each message is one trace, each span the child of the one before: the group
            // copy through the router, the 1:1 message straight from its gateway.
            var throughRouter: [Collector.Received] = []
            var direct: [Collector.Received] = []
            try await waitUntil(timeout: .seconds(20)) {
                let spans = collector.spans.withLock { $0 }
                for first in spans where first.service == "whisper-gateway" && ["send_message", "group_send_message"].contains(first.name) {
                    let trace = spans.filter { $0.traceId == first.traceId }
                    if let route = trace.first(where: { $0.name == "route \(first.name)" && $0.parentSpanId == first.spanId }),
                       let deliver = trace.first(where: { $0.name == "deliver message_received" && $0.parentSpanId == route.spanId }) {
                        throughRouter = [first, route, deliver]
                    } else if let deliver = trace.first(where: { $0.name == "deliver message_received" && $0.parentSpanId == first.spanId }) {
                        direct = [first, deliver]
                    }
                }
                return !throughRouter.isEmpty && !direct.isEmpty
            }
            #expect(throughRouter.map(\.service) == ["whisper-gateway", "whisper-router", "whisper-gateway"])
            #expect(direct.map(\.service) == ["whisper-gateway", "whisper-gateway"])
            #expect(Set(throughRouter.map(\.traceId)).count == 1)
            #expect(Set(direct.map(\.traceId)).count == 1)
            #expect(direct.first?.traceId != throughRouter.first?.traceId)
            for service in services { kill(service.process.processIdentifier, SIGTERM) }
            for service in services { try? await waitUntil(timeout: .seconds(15)) { !service.process.isRunning } }
            withExtendedLifetime(redisServer) {}
        }
    }
}
