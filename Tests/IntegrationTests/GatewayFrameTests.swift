import Foundation
import GatewayService
import AuthService
import HummingbirdWSClient
import NIOCore
import NIOWebSocket
import Testing
import WhisperShared

/// Bad frames over a real WebSocket, with gateway and auth running on real Redis and Postgres.
@Suite struct GatewayFrameTests {
    struct Stack: StartedForATest {
        let gateway: RunningService
        let auth: RunningService
        let database: PostgresSettings
        var url: String { "ws://127.0.0.1:\(gateway.port)/ws" }

        func stop() async throws {
            defer { TestDatabases.shared.release(database) }
            try await gateway.stop()
            try await auth.stop()
        }
    }

    func startStack() async throws -> Stack {
        let database = try await TestDatabases.shared.make()
        return try await TestServers.startAuth(TestServers.authSettings(database)).then { auth in
            let gateway = try await RunningService.start { running in
                buildGateway(settings: TestServers.gatewaySettings(database, authPort: auth.internalPort), logger: TestServers.logger, onServerRunning: running).assembly
            }
            return try await Stack(gateway: gateway, auth: auth, database: database).then { stack in
                _ = try await HTTP.waitFor("\(gateway.baseURL)/ready") { $0.status == 200 }
                _ = try await HTTP.waitFor("\(auth.baseURL)/ready") { $0.status == 200 }
                return stack
            }
        }
    }

    static let session = String(repeating: "x", count: 43)

    /// Each kind of bad frame, what the error frame must say, and whether a requestId comes back.
    static let badFrames: [(name: String, frame: String, code: ErrorCode, message: String, requestId: String?)] = [
        ("non-JSON", "{not json", .invalidPayload, "frame is not valid JSON", nil),
        ("JSON but not an object", "[1, 2, 3]", .invalidPayload, "frame must be a JSON object", nil),
        ("unknown type", #"{"type":"teleport","requestId":"req-1","payload":{}}"#, .invalidPayload, "unknown frame type", "req-1"),
        ("schema mismatch", #"{"type":"register_begin","requestId":"req-2","payload":{"protocolVersion":1,"cryptoVersion":1,"deviceId":"nope","platform":"ios"}}"#,
         .invalidPayload, "payload.deviceId must be a UUID", "req-2"),
        ("missing field", #"{"type":"register_begin","requestId":"req-3","payload":{"protocolVersion":1,"cryptoVersion":1,"platform":"ios"}}"#,
         .invalidPayload, "payload.deviceId is required", "req-3"),
        ("unknown protocolVersion", #"{"type":"logout","requestId":"req-4","payload":{"protocolVersion":7,"cryptoVersion":1,"sessionToken":"\#(session)"}}"#,
         .invalidPayload, "unsupported protocolVersion 7; supported: [1]", "req-4"),
        ("unknown cryptoVersion", #"{"type":"logout","requestId":"req-5","payload":{"protocolVersion":1,"cryptoVersion":3,"sessionToken":"\#(session)"}}"#,
         .invalidPayload, "unsupported cryptoVersion 3; supported: [1, 2]", "req-5"),
        ("privileged frame without a session", #"{"type":"fetch_pending","requestId":"req-6","payload":{"protocolVersion":1,"cryptoVersion":1,"sessionToken":"\#(session)"}}"#,
         .notRegistered, "no valid session for this connection; register first", "req-6"),
    ]

    @Test func everyKindOfBadFrameGetsItsErrorAndTheSocketStaysOpen() async throws {
        try await startStack().running { stack in
            try await WebSocketTest.connect(stack.url) { session in
                for bad in Self.badFrames {
                    try await session.send(bad.frame)
                    let reply = try await session.receive()
                    let error = try #require(reply.payload(as: ErrorPayload.self), "\(bad.name): expected an error frame, got \(reply.type)")
                    #expect(error.code == bad.code, "\(bad.name)")
                    #expect(error.message == bad.message, "\(bad.name)")
                    #expect(error.requestId == bad.requestId, "\(bad.name)")
                    #expect(reply.requestId == bad.requestId, "\(bad.name)")
                }
                // Still open: a ping is answered.
                let before = Clock.millisecondsNow()
                try await session.send(#"{"type":"ping","requestId":"after","payload":{}}"#)
                let pong = try await session.receive()
                #expect(pong.requestId == "after")
                let serverTime = try #require(pong.payload(as: Pong.self)).serverTime
                #expect(serverTime >= before - 1_000 && serverTime <= Clock.millisecondsNow() + 1_000)
            }
            // Each refusal was counted by code.
            let metrics = try await HTTP.get("\(stack.gateway.baseURL)/metrics").body
            #expect(metrics.contains(#"whisper_errors_total{code="INVALID_PAYLOAD",transport="ws"} 7"#))
            #expect(metrics.contains(#"whisper_errors_total{code="NOT_REGISTERED",transport="ws"} 1"#))
        }
    }

    @Test func aFrameOfExactlyTheLimitIsReadAndOneByteMoreClosesWith1009() async throws {
        try await startStack().running { stack in
            let ping = #"{"type":"ping","payload":{}}"#
            let exact = ping + String(repeating: " ", count: Limits.MAX_WS_FRAME_BYTES - ping.utf8.count)
            try await WebSocketTest.connect(stack.url) { session in
                try await session.send(exact)
                #expect(try await session.receive().type == .pong)
            }
            let close = try await WebSocketTest.connect(stack.url) { session in
                try await session.send(exact + " ")
                // The server answers with a close frame, not an error frame.
                while try await session.next(timeout: .seconds(5)) != nil {}
            }
            #expect(close?.closeCode == .messageTooLarge)
        }
    }

    @Test func aFragmentedMessageOverTheLimitClosesWith1009() async throws {
        try await startStack().running { stack in
            let close = try await WebSocketTest.connect(stack.url) { session in
                let half = ByteBuffer(repeating: UInt8(ascii: " "), count: 300_000)
                try await session.outbound.write(.custom(WebSocketFrame(fin: false, opcode: .text, data: half)))
                try await session.outbound.write(.custom(WebSocketFrame(fin: true, opcode: .continuation, data: half)))
                while try await session.next(timeout: .seconds(5)) != nil {}
            }
            #expect(close?.closeCode == .messageTooLarge)
        }
    }

    @Test func drainingTellsClientsToReconnect() async throws {
        // The gateway is drained inside; the stack's stop then finds it stopped.
        try await startStack().running { stack in
            let gateway = stack.gateway
            try await WebSocketTest.connect(stack.url) { session in
                try await session.send(#"{"type":"ping","payload":{}}"#)
                _ = try await session.receive()
                await gateway.group.triggerGracefulShutdown()
                let frame = try await session.receive()
                let reconnect = try #require(frame.payload(as: Reconnect.self))
                #expect(reconnect.reason == "server_shutdown")
                #expect(reconnect.retryAfterMs == 1_000)
                // While it drains (this socket is still open) the instance is not ready and
                // takes no new sockets.
                #expect(try await HTTP.get("\(gateway.baseURL)/ready").status == 503)
                await #expect(throws: (any Error).self) {
                    try await WebSocketTest.connect(stack.url) { _ in }
                }
            }
            try await gateway.task.value
        }
    }
}
