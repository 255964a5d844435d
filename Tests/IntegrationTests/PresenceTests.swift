import Foundation
import NIOCore
import NIOPosix
import Testing
import WhisperClient
import WhisperShared

/// Presence (docs/protocol.md section 8): only to direct peers that subscribed, only on
/// connect, disconnect and heartbeat timeout.
@Suite(.serialized)
struct PresenceTests {
    @Test func aPeerLearnsOfConnectAndCleanDisconnectAndAStrangerNever() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let carol = try await stack.user(on: 1)
            _ = try await alice.sendAndWaitForArrival("hi", to: bob)
            // One message, taken by Bob and not answered, makes no peers (issue 34, item 5):
            // Alice, a stranger to Bob until he writes back, learns nothing of him.
            #expect(try await alice.connection.subscribePresence([bob.whisperId]).peers.isEmpty)
            #expect(try await bob.connection.subscribePresence([alice.whisperId]).peers.isEmpty)
            _ = try await bob.sendAndWaitForArrival("hi back", to: alice)

            // Bob is Alice's peer; Carol is nobody's. The snapshot leaves strangers out.
            let bobs = try await bob.connection.subscribePresence([alice.whisperId, carol.whisperId])
            #expect(bobs.peers == [PresenceSnapshot.Peer(whisperId: alice.whisperId, status: .online)])
            let carols = try await carol.connection.subscribePresence([alice.whisperId, bob.whisperId])
            #expect(carols.peers.isEmpty)
            // The other way round works too (each wrote to the other).
            let alices = try await alice.connection.subscribePresence([bob.whisperId])
            #expect(alices.peers == [PresenceSnapshot.Peer(whisperId: bob.whisperId, status: .online)])

            // A clean disconnect.
            await alice.connection.close()
            let offline = try #require(try await bob.events(.presence).first?.payload(as: PresenceUpdate.self))
            #expect(offline.whisperId == alice.whisperId)
            #expect(offline.status == .offline)

            // Back, on the other gateway: online again once the socket holds the session.
            let back = try await stack.reconnect(alice, on: 1)
            _ = try await back.connection.fetchPending()
            let online = try #require(try await bob.events(.presence, count: 2).last?.payload(as: PresenceUpdate.self))
            #expect(online.whisperId == alice.whisperId)
            #expect(online.status == .online)
            // Alice's new socket did not subscribe: it hears nothing of Bob.
            await bob.connection.close()
            try await stack.waitUntilOffline(bob)
            _ = try await back.connection.ping()

            #expect(await carol.events.all(.presence).isEmpty)
            #expect(await back.events.all(.presence).isEmpty)
            let metrics = try await stack.metricsText(of: stack.gateways)
            #expect(Metrics.value(in: metrics, "whisper_gateway_presence_events_total", ["outcome": "sent"]) == 2)
        }
    }

    @Test func aSocketThatStopsAnsweringPingsGoesOfflineForItsPeers() async throws {
        try await MessagingStack.start(gateway: { $0.pingInterval = .seconds(1) }).running { stack in
            let alice = try await stack.offlineUser(on: 0)
            let bob = try await stack.user(on: 1)
            // Alice needs a socket to send from to become Bob's peer.
            let sender = try await stack.reconnect(alice, on: 0)
            try await sender.connection.send(sender.message("hi", to: bob))
            try await bob.connection.send(bob.message("hi", to: alice))
            await sender.connection.close()
            try await stack.waitUntilOffline(alice)

            // Alice again, on a socket that answers nothing once it has its session.
            let silent = try await SilentSocket.open(port: stack.gateways[0].port)
            try await silent.send(ClientFrameCodec.encode(FetchPending(sessionToken: alice.token, .init())))
            try await stack.withRedis { redis in
                try await waitUntil { try await PresenceStore(redis: redis).lookup(alice.whisperId) != nil }
            }
            let snapshot = try await bob.connection.subscribePresence([alice.whisperId])
            #expect(snapshot.peers.first?.status == .online)

            let offline = try #require(try await bob.events(.presence, timeout: .seconds(20)).first?.payload(as: PresenceUpdate.self))
            #expect(offline.whisperId == alice.whisperId)
            #expect(offline.status == .offline)
            await silent.close()
        }
    }

    @Test func presenceEventsPastTheIdentitysLimitAreNotSent() async throws {
        try await MessagingStack.start(gateway: { $0.limits[.presenceEventsPerIdentity] = RateLimitRule(capacity: 2, period: .seconds(3_600)) }).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            _ = try await alice.sendAndWaitForArrival("hi", to: bob)
            _ = try await bob.sendAndWaitForArrival("hi", to: alice)
            _ = try await bob.connection.subscribePresence([alice.whisperId])
            var current = alice
            for _ in 0..<3 {
                await current.connection.close()
                try await stack.waitUntilOffline(alice)
                current = try await stack.reconnect(alice, on: 0)
                _ = try await current.connection.fetchPending()
            }
            try await waitUntil {
                let metrics = try await stack.metricsText(of: stack.gateways)
                return Metrics.value(in: metrics, "whisper_gateway_presence_events_total", ["outcome": "limited"]) == 4
            }
            #expect(await bob.events.all(.presence).count == 2)
        }
    }
}

/// A WebSocket client that sends frames but never reads after the upgrade: it answers
/// no ping, as a phone that lost its network without closing does.
final class SilentSocket: Sendable {
    let channel: any Channel

    private init(channel: any Channel) {
        self.channel = channel
    }

    /// A WebSocket upgrade request for `/ws`, as a client writes it on a new connection.
    static let upgradeRequest = "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"

    /// `receiveBuffer`: a small one makes the server's side fill soon.
    static func open(port: Int, receiveBuffer: Int? = nil) async throws -> SilentSocket {
        let upgraded = MultiThreadedEventLoopGroup.singleton.any().makePromise(of: Void.self)
        var bootstrap = ClientBootstrap(group: upgraded.futureResult.eventLoop)
        if let receiveBuffer {
            bootstrap = bootstrap.channelOption(.socketOption(.so_rcvbuf), value: SocketOptionValue(receiveBuffer))
        }
        let channel = try await bootstrap
            .channelOption(.autoRead, value: false)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(UpgradeWatcher(upgraded: upgraded)) }
            }
            .connect(host: "127.0.0.1", port: port)
            .get()
        try await channel.writeAndFlush(channel.allocator.buffer(string: upgradeRequest))
        channel.read()
        try await upgraded.futureResult.get()
        return SilentSocket(channel: channel)
    }

    /// Writes one masked text frame (RFC 6455 section 5.2; clients must mask).
    func send(_ payload: [UInt8]) async throws {
        var frame: [UInt8] = [0x81]
        if payload.count < 126 {
            frame.append(0x80 | UInt8(payload.count))
        } else {
            frame += [0x80 | 126, UInt8(payload.count >> 8 & 0xFF), UInt8(payload.count & 0xFF)]
        }
        let mask: [UInt8] = (0..<4).map { _ in UInt8.random(in: 0...255) }
        frame += mask
        frame += payload.enumerated().map { $0.element ^ mask[$0.offset % 4] }
        try await channel.writeAndFlush(channel.allocator.buffer(bytes: frame))
    }

    func close() async {
        try? await channel.close()
    }
}
