import AuthService
import Foundation
import GatewayService
import NIOCore
import NIOPosix
import Testing
import WhisperShared

/// A client that stops reading must not make the gateway hold its frames without bound.
@Suite struct SlowSocketTests {
    @Test func aSocketThatStopsReadingIsDroppedOnceFramesPileUp() async throws {
        // Small frames: the count of unsent frames (4,096) is what trips.
        let handed = try await frameSocketThatDoesNotRead(frameBytes: 2_000, batches: 40) { _ in }
        #expect(handed > 4_096)
    }

    @Test func aSocketThatStopsReadingIsDroppedOnceBytesPileUp() async throws {
        // Large frames (big pages): the bytes unsent trip long before the count does.
        let handed = try await frameSocketThatDoesNotRead(frameBytes: 200_000, batches: 20) { $0.maxUnsentBytes = 2 * 1_048_576 }
        #expect(handed < 500, "dropped by bytes, not by the 4,096-frame count")
    }

    /// Publishes `frameBytes`-sized frames to a socket that reads nothing until the
    /// gateway drops it (which the test requires); how many were handed over.
    private func frameSocketThatDoesNotRead(
        frameBytes: Int, batches: Int, _ configure: (inout GatewaySettings) -> Void
    ) async throws -> Int {
        let database = try await TestDatabases.shared.make()
        defer { TestDatabases.shared.release(database) }
        return try await TestServers.startAuth(TestServers.authSettings(database)).running { auth in
            var configured = TestServers.gatewaySettings(database, authPort: auth.internalPort)
            configure(&configured)
            let settings = configured
            var handle: GatewayHandle?
            let gateway = try await RunningService.start { running in
                let built = buildGateway(settings: settings, logger: TestServers.logger, onServerRunning: running)
                handle = built
                return built.assembly
            }
            return try await gateway.running { gateway in
                guard let connections = handle?.connections else { throw TestSetupError("no gateway handle") }
                _ = try await HTTP.waitFor("\(gateway.baseURL)/ready") { $0.status == 200 }

                // A WebSocket whose client reads the upgrade answer and nothing after it, with a
                // small receive buffer so that the server's side fills soon.
                let socket = try await SilentSocket.open(port: gateway.port, receiveBuffer: 4_096)
                try await waitUntil(timeout: .seconds(5)) { connections.count == 1 }
                let connId = try #require(connections.connectionIDs().first)

                // Frames for it, as routers send them: far more than its buffers and the
                // gateway's limit of unsent frames (4,096) hold.
                let padding = String(repeating: "x", count: frameBytes)
                let frame = Array(#"{"type":"pong","payload":{"serverTime":1,"padding":"\#(padding)"}}"#.utf8)
                let command = GatewayCommand(kind: .deliver, connId: connId, frame: frame).encoded
                let publish = RedisCommand("PUBLISH", RedisKeys.gatewayChannel(settings.common.instanceID), command)
                let redis = RedisClient(configuration: TestServers.redis, logger: TestServers.logger)
                let redisTask = Task { try await redis.run() }
                defer { redisTask.cancel() }
                try await waitUntil { redis.isConnected }
                var handed = 0
                for _ in 0..<batches {
                    let replies = try await redis.pipeline(Array(repeating: publish, count: frameBytes > 100_000 ? 20 : 500))
                    handed += replies.filter { ($0.int ?? 0) > 0 }.count
                    if connections.count == 0 { break }
                }
                // The gateway dropped the socket instead of queueing the rest.
                try await waitUntil(timeout: .seconds(10)) { connections.count == 0 }
                #expect(connections.count == 0)
                await socket.close()
                return handed
            }
        }
    }
}

/// Completes `upgraded` once the HTTP answer to the upgrade request has come (101),
/// then asks for nothing more.
final class UpgradeWatcher: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    let upgraded: EventLoopPromise<Void>
    var received = ""

    init(upgraded: EventLoopPromise<Void>) {
        self.upgraded = upgraded
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        received += String(buffer: unwrapInboundIn(data))
        guard received.contains("\r\n\r\n") else {
            context.read()
            return
        }
        if received.hasPrefix("HTTP/1.1 101") {
            upgraded.succeed()
        } else {
            upgraded.fail(TestSetupError("upgrade refused: \(received.prefix(40))"))
        }
    }
}
