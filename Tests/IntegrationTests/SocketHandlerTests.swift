import HTTPTypes
import AsyncHTTPClient
import Foundation
@testable import GatewayService
import Logging
import NIOCore
import NIOEmbedded
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import Synchronization
import Testing
import WhisperShared

/// The gateway's own WebSocket layer (`SocketHandler`, `SocketInbox`, the upgrade
/// answers of `GatewayServerChannel`).
@Suite struct SocketInboxTests {
    @Test func readingPausesAtTheBoundAndResumesOnceWhenTheQueueIsDownToItsLowMark() {
        let inbox = SocketInbox(bounds: .init(pauseAtMessages: 4, pauseAtBytes: 1_000, resumeAtMessages: 1))
        var pauses = 0
        var starts = 0
        for index in 0..<6 {
            let arrival = inbox.push([UInt8(index)])
            if arrival.pauseReading { pauses += 1 }
            if arrival.startHandling { starts += 1 }
        }
        // One task for the whole burst, one pause at the fourth message.
        #expect(starts == 1)
        #expect(pauses == 1)
        #expect(inbox.isPaused)
        var order: [UInt8] = []
        var resumes: [Int] = []
        while case .message(let bytes, let resume) = inbox.next() {
            order.append(contentsOf: bytes)
            if resume { resumes.append(inbox.queued) }
        }
        #expect(order == [0, 1, 2, 3, 4, 5])
        #expect(resumes == [1])
        #expect(!inbox.isPaused)
        // The task ended (idle): the next message starts another.
        #expect(inbox.push([9]).startHandling)
    }

    /// Only the message that starts a handling run has waited for the gateway (from when
    /// it was read); one queued behind its socket's earlier messages waited for them, and
    /// is not timed (`waitingSince` 0), so a socket's own backlog is never refused as busy.
    @Test func onlyARunsFirstMessageIsTimed() {
        let inbox = SocketInbox(bounds: .standard)
        let before = NIODeadline.now().uptimeNanoseconds
        _ = inbox.push([1])
        _ = inbox.push([2])
        let after = NIODeadline.now().uptimeNanoseconds
        let first = inbox.nextTimed()
        guard case .message(let bytes, _) = first.next else {
            Issue.record("expected the first message")
            return
        }
        #expect(bytes == [1])
        #expect(first.waitingSince >= before && first.waitingSince <= after, "timed from when it was read")
        let second = inbox.nextTimed()
        guard case .message([2], _) = second.next else {
            Issue.record("expected the second message")
            return
        }
        #expect(second.waitingSince == 0, "queued behind the socket's own first message")
        guard case .idle = inbox.next() else {
            Issue.record("expected the run to end")
            return
        }
        // A message read while nothing was handled starts a new run, and is timed again.
        #expect(inbox.push([3]).startHandling)
        #expect(inbox.nextTimed().waitingSince > 0)
    }

    /// The gateway pings only a client it heard nothing from since its last look: an
    /// app that sends frames of its own more often (the SDK pings every 20 s) costs no
    /// ping and no pong; a silent one is pinged, and dropped when the ping goes
    /// unanswered until the next look.
    @Test func aClientHeardFromSinceTheLastLookIsNotPinged() throws {
        let channel = EmbeddedChannel()
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        let connection = ClientConnection.forTest(on: channel)
        let settings = SocketHandler.Settings(
            pingInterval: .seconds(1), closeTimeout: .seconds(1), authenticationDeadline: .hours(1), maxMessageBytes: 1 << 20,
            onMessage: { _, _, _, _ in false }, onClosed: { _ in }
        )
        try channel.pipeline.syncOperations.addHandler(SocketHandler(connection: connection, settings: settings))
        func sent() throws -> [WebSocketOpcode] {
            try WireFrames.written(to: channel).map(\.opcode)
        }
        func hear() throws {
            try channel.writeInbound(WireFrames.clientBytes(.pong, []))
        }
        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(try sent() == [.ping], "silent since it opened: pinged")
        try hear()
        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(try sent() == [], "heard from since the last look: not pinged")
        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(try sent() == [.ping], "silent again: pinged")
        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(try sent() == [.connectionClose], "the ping went unanswered: dropped")
        _ = try? channel.finish()
    }

    /// The sockets of one event loop share one timer (`SocketLooks`): each is looked at
    /// once per interval, counted from when it opened, and a socket that closes leaves
    /// the wheel whatever its place, so the timer stops with the last one.
    @Test func theSocketsOfALoopShareOneTimerAndLeaveItWhenTheyClose() throws {
        let loop = EmbeddedEventLoop()
        let settings = SocketHandler.Settings(
            pingInterval: .seconds(1), closeTimeout: .seconds(1), authenticationDeadline: .hours(1), maxMessageBytes: 1 << 20,
            onMessage: { _, _, _, _ in false }, onClosed: { _ in }
        )
        func open() throws -> EmbeddedChannel {
            let channel = EmbeddedChannel(loop: loop)
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
            let connection = ClientConnection.forTest(on: channel)
            try channel.pipeline.syncOperations.addHandler(SocketHandler(connection: connection, settings: settings))
            return channel
        }
        func pinged(_ channel: EmbeddedChannel) throws -> Bool {
            try WireFrames.written(to: channel).map(\.opcode) == [.ping]
        }
        let wheel = settings.looks.wheel(of: loop)
        let first = try open()
        loop.advanceTime(by: .milliseconds(500))
        let second = try open(), third = try open()
        #expect(wheel.sockets == 3)
        loop.advanceTime(by: .milliseconds(500))
        #expect(try pinged(first), "one interval after it opened")
        #expect(try !pinged(second) && !pinged(third), "half an interval after they opened")
        // The second leaves its slot; the third takes its place there.
        // (Closed, not finished: an EmbeddedChannel's finish cancels its loop's timers.)
        try second.close().wait()
        #expect(wheel.sockets == 2)
        loop.advanceTime(by: .milliseconds(500))
        #expect(try pinged(third), "still looked at after moving within its slot")
        #expect(try !pinged(first))
        try third.close().wait()
        try first.close().wait()
        #expect(wheel.sockets == 0, "every socket left, wherever it had moved to")
        #expect(!wheel.ticking, "the loop's timer stopped with its last socket")
        for channel in [first, second, third] { _ = try? channel.finish(acceptAlreadyClosed: true) }
    }

    /// A proven token is trusted for a few seconds; past them the socket's look lets go
    /// of it, so an idle socket holds no copy.
    @Test func aTokenWhoseTrustLapsedIsLetGo() throws {
        let channel = EmbeddedChannel()
        let connection = ClientConnection.forTest(on: channel)
        connection.rememberVerified("a-token")
        connection.forgetLapsedTrust()
        #expect(connection.holdsVerifiedToken && connection.hasVerified("a-token"), "still trusted")
        connection.forgetLapsedTrust(now: .now + ClientConnection.verifiedFor)
        #expect(!connection.holdsVerifiedToken, "lapsed: let go")
        _ = try? channel.finish()
    }

    /// A busy socket's token is looked up again in its last second of trust, once, beside
    /// its frames; the answer extends the trust, ends it, or (Redis failed) leaves it to
    /// lapse. An answer for a token let go meanwhile (a refresh, a logout) is dropped.
    @Test func aTrustedTokenIsRenewedAheadOfItsLapseOnce() throws {
        let channel = EmbeddedChannel()
        let connection = ClientConnection.forTest(on: channel)
        let start = ContinuousClock.now
        connection.rememberVerified("a-token")
        var trust = connection.trusts("a-token", now: start)
        #expect(trust.trusted && !trust.renew, "fresh: no lookup")
        let late = start + ClientConnection.verifiedFor - .milliseconds(500)
        trust = connection.trusts("a-token", now: late)
        #expect(trust.trusted && trust.renew, "in its last second: looked up again")
        trust = connection.trusts("a-token", now: late)
        #expect(trust.trusted && !trust.renew, "one lookup at a time")
        connection.renewed("a-token", live: true, now: late)
        trust = connection.trusts("a-token", now: start + ClientConnection.verifiedFor + .seconds(1))
        #expect(trust.trusted && !trust.renew, "renewed: trusted past the first lapse")
        // Redis failed: the trust stands until its lapse, and the next frame in its last
        // second asks again.
        let later = late + ClientConnection.verifiedFor - .milliseconds(500)
        trust = connection.trusts("a-token", now: later)
        #expect(trust.renew)
        connection.renewed("a-token", live: nil, now: later)
        trust = connection.trusts("a-token", now: later)
        #expect(trust.trusted && trust.renew)
        // The session ended: no longer trusted.
        connection.renewed("a-token", live: false, now: later)
        #expect(!connection.trusts("a-token", now: later).trusted)
        // A token let go while its lookup was out is not brought back by the answer.
        connection.rememberVerified("b-token")
        let bLate = ContinuousClock.now + ClientConnection.verifiedFor - .milliseconds(500)
        #expect(connection.trusts("b-token", now: bLate).renew)
        connection.forgetVerifiedSession()
        connection.renewed("b-token", live: true, now: bLate)
        #expect(!connection.holdsVerifiedToken)
        _ = try? channel.finish()
    }

    @Test func bytesPauseReadingToo() {
        let inbox = SocketInbox(bounds: .init(pauseAtMessages: 100, pauseAtBytes: 1_000, resumeAtMessages: 10))
        #expect(!inbox.push([UInt8](repeating: 1, count: 600)).pauseReading)
        #expect(inbox.push([UInt8](repeating: 2, count: 600)).pauseReading)
        guard case .message(_, let resume) = inbox.next() else {
            Issue.record("expected a message")
            return
        }
        #expect(resume)
    }

    @Test func aClosedSocketEndsOnceAfterItsLastMessage() {
        let inbox = SocketInbox(bounds: .standard)
        _ = inbox.push([1])
        // A task is handling: closing does not start another.
        #expect(inbox.end() == false)
        guard case .message = inbox.next() else {
            Issue.record("the message read before the close must still be handled")
            return
        }
        guard case .ended = inbox.next() else {
            Issue.record("expected the end after the last message")
            return
        }
        // An idle socket that closes needs a task to finish it.
        let idle = SocketInbox(bounds: .standard)
        #expect(idle.end())
        guard case .ended = idle.next() else {
            Issue.record("expected the end")
            return
        }
    }
}

@Suite struct SocketHandlerTests {
    /// Gateway and auth on real Redis and Postgres, with `adjust` applied to the gateway's settings.
    func withGateway(_ adjust: (inout GatewaySettings) -> Void, _ body: (Int) async throws -> Void) async throws {
        let database = try await TestDatabases.shared.make()
        defer { TestDatabases.shared.release(database) }
        try await TestServers.startAuth(TestServers.authSettings(database)).running { auth in
            var settings = TestServers.gatewaySettings(database, authPort: auth.internalPort)
            adjust(&settings)
            try await RunningService.start { [settings] running in
                buildGateway(settings: settings, logger: TestServers.logger, onServerRunning: running).assembly
            }.running { gateway in
                _ = try await HTTP.waitFor("\(gateway.baseURL)/ready") { $0.status == 200 }
                try await body(gateway.port)
            }
        }
    }

    @Test func aBurstOfFramesIsAnsweredCompletelyAndInOrder() async throws {
        // 400 frames written without waiting: reading pauses and resumes many times
        // (16 queued / 4 left), and every frame is answered, in the order sent.
        let count = 400
        try await withGateway({
            $0.limits[.controlPerSocket] = RateLimitRule(capacity: 10_000, period: .seconds(60))
            $0.limits[.controlPerAddress] = RateLimitRule(capacity: 10_000, period: .seconds(60))
        }) { port in
            try await WebSocketTest.connect("ws://127.0.0.1:\(port)/ws") { socket in
                for index in 0..<count {
                    try await socket.send(#"{"type":"ping","requestId":"r-\#(index)","payload":{}}"#)
                }
                var answered: [String] = []
                for _ in 0..<count {
                    let frame = try await socket.receive(timeout: .seconds(30))
                    #expect(frame.type == .pong)
                    answered.append(frame.requestId ?? "none")
                }
                #expect(answered == (0..<count).map { "r-\($0)" })
            }
        }
    }

    /// A WebSocket upgrade request, as a client library sends it, on `client` (by
    /// default a client of its own, so that it is its connection's first request); the
    /// answer's status, `Retry-After`, `Location` and body. Redirects are not followed.
    static func upgrade(
        port: Int, path: String = "/ws", origin: String? = nil, forwardedFor: String? = nil, on client: HTTPClient? = nil
    ) async throws -> (status: Int, retryAfter: String?, location: String?, body: String) {
        let http = client ?? HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(redirectConfiguration: .disallow))
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)\(path)")
        request.headers.add(name: "Connection", value: "Upgrade")
        request.headers.add(name: "Upgrade", value: "websocket")
        request.headers.add(name: "Sec-WebSocket-Version", value: "13")
        request.headers.add(name: "Sec-WebSocket-Key", value: "dGhlIHNhbXBsZSBub25jZQ==")
        if let origin { request.headers.add(name: "Origin", value: origin) }
        if let forwardedFor { request.headers.add(name: "X-Forwarded-For", value: forwardedFor) }
        let response = try await http.execute(request, timeout: .seconds(10))
        // An upgrade that was let through has no body that ends: the socket stays open.
        let body = response.status == .switchingProtocols ? ByteBuffer() : try await response.body.collect(upTo: 1 << 16)
        if client == nil { try await http.shutdown() }
        return (Int(response.status.code), response.headers.first(name: "Retry-After"), response.headers.first(name: "Location"), String(buffer: body))
    }

    /// Behind a trusted proxy, each client has its own share of the per-address socket cap
    /// (the address the proxy names); from anyone else the header changes nothing.
    @Test func aTrustedProxyNamesTheClientAndNobodyElseCan() async throws {
        @Sendable func via(_ client: String) -> HTTPFields { [HTTPField.Name("X-Forwarded-For")!: "198.51.100.9, \(client)"] }
        try await withGateway({
            $0.maxSocketsPerAddress = 1
            $0.common.trustedProxies = TrustedProxies("127.0.0.1/32")!
        }) { port in
            try await WebSocketTest.connect("ws://127.0.0.1:\(port)/ws", headers: via("203.0.113.7")) { _ in
                // The same client is at its cap; another client behind the proxy is not.
                #expect(try await Self.upgrade(port: port, forwardedFor: "198.51.100.9, 203.0.113.7").status == 429)
                try await WebSocketTest.connect("ws://127.0.0.1:\(port)/ws", headers: via("203.0.113.8")) { socket in
                    try await socket.send(#"{"type":"ping","requestId":"other-client","payload":{}}"#)
                    #expect(try await socket.receive().requestId == "other-client")
                }
            }
        }
        // Not a trusted proxy: the header is ignored, every socket is 127.0.0.1's.
        try await withGateway({ $0.maxSocketsPerAddress = 1 }) { port in
            try await WebSocketTest.connect("ws://127.0.0.1:\(port)/ws", headers: via("203.0.113.7")) { _ in
                let refused = try await Self.upgrade(port: port, forwardedFor: "203.0.113.8")
                #expect(refused.status == 429)
            }
        }
    }

    /// An IPv6 subscriber holds a whole /64: every address in it is one client for the
    /// per-address limits (here the socket cap), another /64 is another client, and an
    /// IPv4 address mapped into IPv6 is that IPv4 address.
    @Test func everyAddressOfOneIPv6PrefixIsOneClient() async throws {
        @Sendable func via(_ client: String) -> HTTPFields { [HTTPField.Name("X-Forwarded-For")!: client] }
        try await withGateway({
            $0.maxSocketsPerAddress = 1
            $0.common.trustedProxies = TrustedProxies("127.0.0.1/32")!
        }) { port in
            try await WebSocketTest.connect("ws://127.0.0.1:\(port)/ws", headers: via("2001:db8:1:2::7")) { _ in
                #expect(try await Self.upgrade(port: port, forwardedFor: "2001:db8:1:2:ffff:ffff:ffff:9").status == 429, "the same /64")
                try await WebSocketTest.connect("ws://127.0.0.1:\(port)/ws", headers: via("2001:db8:1:3::7")) { socket in
                    try await socket.send(#"{"type":"ping","requestId":"next-prefix","payload":{}}"#)
                    #expect(try await socket.receive().requestId == "next-prefix")
                }
            }
            try await WebSocketTest.connect("ws://127.0.0.1:\(port)/ws", headers: via("::ffff:203.0.113.7")) { _ in
                let same = try await Self.upgrade(port: port, forwardedFor: "203.0.113.7")
                #expect(same.status == 429, "an IPv4-mapped address is its IPv4 address")
            }
        }
    }

    @Test func aRefusedUpgradeIsAnsweredWithItsReason() async throws {
        try await withGateway({ $0.maxSocketsPerAddress = 1 }) { port in
            try await WebSocketTest.connect("ws://127.0.0.1:\(port)/ws") { _ in
                // The address holds its one socket.
                let full = try await Self.upgrade(port: port)
                #expect(full.status == 429)
                #expect(full.retryAfter == "30")
                #expect(full.body.contains("too many sockets from this address"))
            }
            // Room again once the socket closed (a plain GET /ws then says 400: no upgrade headers).
            try await waitUntil { try await HTTP.get("http://127.0.0.1:\(port)/ws").status == 400 }
            try await WebSocketTest.connect("ws://127.0.0.1:\(port)/ws") { socket in
                try await socket.send(#"{"type":"ping","requestId":"again","payload":{}}"#)
                #expect(try await socket.receive().requestId == "again")
            }
        }
        try await withGateway({ $0.allowedOrigins = ["https://app.example"] }) { port in
            let foreign = try await Self.upgrade(port: port, origin: "https://elsewhere.example")
            #expect(foreign.status == 403)
            #expect(foreign.body.contains("origin"))
            let elsewhere = try await Self.upgrade(port: port, path: "/socket")
            #expect(elsewhere.status == 404)
            // An upgrade asked on a kept-alive HTTP connection is sent to a new one.
            let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(redirectConfiguration: .disallow))
            let health = try await client.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)/health"), timeout: .seconds(10))
            _ = try await health.body.collect(upTo: 1 << 16)
            let again = try await Self.upgrade(port: port, path: "/ws?v=1", on: client)
            #expect(again.status == 307)
            #expect(again.location == "/ws?v=1")
            try await client.shutdown()
        }
    }
}

/// A bare TCP client: sends an upgrade request and then `frames` as they are, and
/// returns every byte the server sent until it closed the connection.
enum RawSocket {
    final class Collector: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let received: EventLoopPromise<[UInt8]>
        private let bytes = Mutex<[UInt8]>([])

        init(received: EventLoopPromise<[UInt8]>) {
            self.received = received
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = unwrapInboundIn(data)
            bytes.withLock { $0 += Array(buffer.readableBytesView) }
        }

        func channelInactive(context: ChannelHandlerContext) {
            received.succeed(bytes.withLock { $0 })
        }
    }

    static func exchange(port: Int, frames: [UInt8]) async throws -> [UInt8] {
        let received = MultiThreadedEventLoopGroup.singleton.any().makePromise(of: [UInt8].self)
        let channel = try await ClientBootstrap(group: received.futureResult.eventLoop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(Collector(received: received)) }
            }
            .connect(host: "127.0.0.1", port: port)
            .get()
        try await channel.writeAndFlush(channel.allocator.buffer(string: SilentSocket.upgradeRequest))
        try await channel.writeAndFlush(channel.allocator.buffer(bytes: frames))
        return try await received.futureResult.get()
    }

    /// The close frame's code in what the server sent after its 101 answer, if any.
    static func closeCode(in bytes: [UInt8]) -> UInt16? {
        let headerEnd = Array("\r\n\r\n".utf8)
        guard let end = (0...max(0, bytes.count - 4)).first(where: { Array(bytes[$0..<min($0 + 4, bytes.count)]) == headerEnd }) else { return nil }
        let frame = Array(bytes[(end + 4)...])
        guard frame.count >= 4, frame[0] == 0x88 else { return nil }
        return UInt16(frame[2]) << 8 | UInt16(frame[3])
    }
}

extension SocketHandlerTests {
    @Test func framesAClientMayNotSendCloseTheSocketWith1002() async throws {
        try await withGateway({ _ in }) { port in
            // A text frame without a mask (RFC 6455: every client frame is masked).
            let unmasked = try await RawSocket.exchange(port: port, frames: [0x81, 0x02, 0x68, 0x69])
            #expect(String(decoding: unmasked.prefix(12), as: UTF8.self) == "HTTP/1.1 101")
            #expect(RawSocket.closeCode(in: unmasked) == 1002)
            // A continuation frame with no message before it (masked, empty payload).
            let stray = try await RawSocket.exchange(port: port, frames: [0x80, 0x80, 1, 2, 3, 4])
            #expect(RawSocket.closeCode(in: stray) == 1002)
            // A client's close frame is answered with its own code.
            let closing = try await RawSocket.exchange(port: port, frames: [0x88, 0x82, 0, 0, 0, 0, 0x0F, 0xA0])
            #expect(RawSocket.closeCode(in: closing) == 4000)
        }
    }
}
