import Crypto
import Foundation
import Logging
import Synchronization
import Testing
import WhisperClient
import WhisperMessaging
import WhisperProtocol
import WhisperShared

/// The SDK's session object against a real stack: it keeps itself connected, the app
/// writes no reconnect code.
@Suite(.serialized, .stopsSessions) struct WhisperSessionTests {
    /// What a session showed: its states and events, gathered as they come.
    final class Watcher: Sendable {
        let states = Mutex<[SessionState]>([])
        /// The states with when each came.
        let timeline = Mutex<[(at: ContinuousClock.Instant, state: SessionState)]>([])
        /// Peers' presence as it came, from snapshots and `presence` frames, in order.
        let presence = Mutex<[PresenceSnapshot.Peer]>([])
        /// Every `ptt_floor` frame of the channels the identity is in.
        let floorFrames = Mutex<[PTTFloor]>([])
        let messages = Mutex<[MessageReceived]>([])
        let snapshots = Mutex<[PresenceSnapshot]>([])
        let credentials = Mutex<[SessionCredentials]>([])
        let alerts = Mutex<[KeyTransparencyError]>([])
        let floors = Mutex<[PTTFloor]>([])
        let whispering = Mutex<[LiveWhisperer.Event]>([])
        let listening = Mutex<[LiveListener.Event]>([])
        private let tasks: Mutex<[Task<Void, Never>]> = Mutex([])

        init(_ session: WhisperSession, acknowledging: Bool = true) {
            let states = Task {
                for await state in session.states {
                    self.states.withLock { $0.append(state) }
                    self.timeline.withLock { $0.append((.now, state)) }
                }
            }
            let events = Task {
                for await event in session.events {
                    switch event {
                    case .message(let message):
                        self.messages.withLock { $0.append(message) }
                        if acknowledging { try? await session.acknowledge(message) }
                    case .presenceSnapshot(let snapshot):
                        self.snapshots.withLock { $0.append(snapshot) }
                        self.presence.withLock { $0 += snapshot.peers }
                    case .frame(let frame):
                        if let update = frame.payload(as: PresenceUpdate.self) {
                            self.presence.withLock { $0.append(.init(whisperId: update.whisperId, status: update.status)) }
                        } else if let floor = frame.payload(as: PTTFloor.self) {
                            self.floorFrames.withLock { $0.append(floor) }
                        }
                    case .credentials(let new): self.credentials.withLock { $0.append(new) }
                    case .directoryAlert(let error): self.alerts.withLock { $0.append(error) }
                    case .floor(let floor): self.floors.withLock { $0.append(floor) }
                    case .whisperer(_, let event): self.whispering.withLock { $0.append(event) }
                    case .listener(_, let event): self.listening.withLock { $0.append(event) }
                    default: break
                    }
                }
            }
            tasks.withLock { $0 = [states, events] }
        }

        func connections(to gateway: String) -> Int {
            states.withLock { $0.filter { $0 == .connected(gateway: gateway) }.count }
        }

        /// The listener ID of the first request to listen from `name` (a Whisperer's watcher).
        func request(from name: String) -> String? {
            whispering.withLock { events in
                for case .request(let id, let who) in events where who == name { return id }
                return nil
            }
        }

        /// How often the listener `id` (`name`) joined (a Whisperer's watcher).
        func joins(_ id: String, _ name: String) -> Int {
            whispering.withLock { $0.filter { $0 == .joined(listenerId: id, name: name) }.count }
        }

        /// Waits until the listener (this watcher's session) hears `live` after `past`.
        func hears(_ live: String, past: [String] = []) async throws {
            try await waitUntil {
                self.listening.withLock { $0.contains { if case .text(let text) = $0 { text.live == live && text.past == past } else { false } } }
            }
        }

        func cancel() { tasks.withLock { $0.forEach { $0.cancel() } } }
    }

    static func session(
        _ stack: MessagingStack, gateways: [Int], keys: WhisperKeys = try! WhisperKeys(mnemonic: BIP39.generateMnemonic()),
        listenerDevice: ListenerDevice? = nil, credentials: SessionCredentials? = nil, delivered: any DeliveredStore = MemoryDeliveredStore()
    ) -> WhisperSession {
        var configuration = WhisperSession.Configuration(
            gateways: gateways.map { stack.websocketURL($0) }, deviceId: RandomID.uuid(), platform: .ios
        )
        configuration.listenerDevice = listenerDevice
        configuration.backoff = .init(initial: .milliseconds(100), maximum: .seconds(2))
        let auth = stack.auth.baseURL
        let api = WhisperAPI(endpoints: WhisperEndpoints(websocket: stack.websocketURL(gateways[0]), auth: auth, attachments: auth, turn: auth))
        return TestSessions.track(
            WhisperSession(configuration: configuration, keys: keys, credentials: credentials, api: api, delivered: delivered, logger: TestServers.logger)
        )
    }

    /// A session on gateways 0 and 1, started and signed in on gateway 0; its watcher
    /// (the caller cancels it) and its Whisper ID.
    static func started(_ stack: MessagingStack) async throws -> (WhisperSession, Watcher, String) {
        let session = Self.session(stack, gateways: [0, 1])
        let watcher = Watcher(session)
        await session.start()
        do {
            try await waitUntil { watcher.connections(to: stack.websocketURL(0)) == 1 }
            return (session, watcher, try #require(await session.credentials?.whisperId))
        } catch {
            watcher.cancel()
            await session.stop()
            throw error
        }
    }

    @Test func aSessionFollowsADrainingGatewayToAnotherAndNothingIsLostOrShownTwice() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let bob = try await stack.user(on: 1)
            let (alice, watcher, aliceId) = try await Self.started(stack)
            defer { watcher.cancel() }
            try await stack.withRedis { try await MessagingStack.makePeers([aliceId, bob.whisperId], on: $0) }
            try await alice.watchPresence([bob.whisperId])
            let bobKeys = bob.peerKeys
            let aliceKeys = try #require(alice.keys)
            func message(_ index: Int) async -> SendMessage {
                let token = await alice.credentials?.sessionToken ?? ""
                return MessageCrypto.makeMessage(Array("to bob \(index)".utf8), from: (aliceId, aliceKeys), to: bobKeys, sessionToken: token)
            }
            var sent: [String] = []
            for index in 0..<20 {
                let next = await message(index)
                sent.append(next.messageId)
                try await alice.send(next)
            }
            // Gateway 0 drains: its sockets are told `reconnect` and the session moves on.
            let stopping = Task { try await stack.gateways[0].stop() }
            for index in 20..<40 {
                let next = await message(index)
                sent.append(next.messageId)
                try await alice.send(next)
            }
            var fromBob: [String] = []
            for index in 0..<10 {
                let reply = MessageCrypto.makeMessage(
                    Array("to alice \(index)".utf8), from: (bob.whisperId, bob.keys),
                    to: PeerKeys(whisperId: aliceId, encPublicKey: try #require(alice.keys).encPublicKey, signPublicKey: try #require(alice.keys).signPublicKey),
                    sessionToken: bob.token
                )
                try await bob.connection.send(reply)
                fromBob.append(reply.messageId)
            }
            try await stopping.value
            try await waitUntil(timeout: .seconds(30)) { watcher.connections(to: stack.websocketURL(1)) >= 1 }

            // Every message of the outbox reached bob, each under its one messageId.
            try await waitUntil(timeout: .seconds(30)) {
                Set(await bob.events.all(.messageReceived).compactMap { $0.payload(as: MessageReceived.self)?.messageId }).isSuperset(of: sent)
            }
            // Each is also told stored (a message can reach bob before its sender is told:
            // docs/architecture.md, "Delivered while it is stored").
            try await waitUntil(timeout: .seconds(30)) { try await alice.outbox.all().allSatisfy { $0.state >= .sent } }
            // Every message of bob's was shown to alice once.
            try await waitUntil(timeout: .seconds(30)) { Set(watcher.messages.withLock { $0.map(\.messageId) }) == Set(fromBob) }
            #expect(watcher.messages.withLock { $0.count } == fromBob.count, "a message was shown twice")
            // Presence was watched again on the new socket.
            try await waitUntil { watcher.snapshots.withLock { $0.count } >= 2 }
            #expect(watcher.snapshots.withLock { $0.last?.peers.map(\.whisperId) } == [bob.whisperId])
            await alice.stop()
            #expect(await alice.state == .idle)
        }
    }

    /// A place the server refuses for now after a reconnect (here the floor, over the
    /// push-to-talk frames' limit) does not hold the session back: it is connected with
    /// the rest, and asks for that place again on the same socket until it is given.
    @Test func aPlaceRefusedForNowAfterAReconnectIsAskedForAgainOnTheSameSocket() async throws {
        try await MessagingStack.start(routers: 1, gateway: { $0.limits[.pttPerIdentity] = RateLimitRule("4/8s")! }).running { stack in
            let bob = try await stack.user(on: 1)
            let (alice, watcher, _) = try await Self.started(stack)
            defer { watcher.cancel() }
            let channel = try await bob.connection.createChannel(name: "crew")
            _ = try await alice.connected { connection, _ in try await connection.joinChannel(code: channel.joinCode) }
            #expect(try await alice.requestFloor(channel.channelId).outcome == .granted)
            // The rest of the bucket goes on listing channels.
            try await waitUntil {
                do {
                    _ = try await alice.connected { connection, _ in try await connection.channels() }
                    return false
                } catch WhisperClientError.refused(.rateLimited, _) {
                    return true
                }
            }
            let floorsBefore = watcher.floors.withLock { $0.count }
            let connectsBefore = watcher.states.withLock { $0.filter(\.isConnected).count }
            await alice.networkChanged()
            // Connected again while the floor is still refused ...
            try await waitUntil(timeout: .seconds(30)) { watcher.states.withLock { $0.filter(\.isConnected).count } > connectsBefore }
            #expect(watcher.floors.withLock { $0.count } == floorsBefore, "the floor came before the bucket refilled")
            // ... and the floor comes once the bucket refills, on the same socket.
            try await waitUntil(timeout: .seconds(30)) {
                watcher.floors.withLock { $0.dropFirst(floorsBefore).contains { $0.channelId == channel.channelId && $0.outcome == .granted } }
            }
            #expect(watcher.states.withLock { $0.filter(\.isConnected).count } == connectsBefore + 1, "one socket")
            await alice.stop()
        }
    }

    @Test func aFloorHeldBeforeAGatewayDrainsIsHeldAgainOnTheNextSocket() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let bob = try await stack.user(on: 1)
            let (alice, watcher, aliceId) = try await Self.started(stack)
            defer { watcher.cancel() }
            let channel = try await bob.connection.createChannel(name: "crew")
            _ = try await alice.connected { connection, _ in try await connection.joinChannel(code: channel.joinCode) }
            #expect(try await alice.requestFloor(channel.channelId).outcome == .granted)

            // Gateway 0 drains: the floor goes with the socket, and comes back with the next.
            try await stack.gateways[0].stop()
            try await waitUntil(timeout: .seconds(30)) { watcher.connections(to: stack.websocketURL(1)) >= 1 }
            try await waitUntil { watcher.floors.withLock { $0.contains { $0.channelId == channel.channelId && $0.outcome == .granted } } }
            let asked = try await bob.connection.requestTalk(channel.channelId)
            #expect(asked.outcome != .granted && asked.holder == aliceId, "\(asked)")

            // Released, it is not asked for again.
            try await alice.releaseFloor(channel.channelId)
            #expect(try await bob.connection.requestTalk(channel.channelId).outcome == .granted)
            await alice.stop()
        }
    }

    @Test func aLiveConversationIsTakenAgainByTheWhispererAndTheListenerAfterEachReconnects() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let (alice, aliceWatch, _) = try await Self.started(stack)
            defer { aliceWatch.cancel() }
            let device = try await ListenerDevice.issue(websocketURL: stack.websocketURL(1))
            let bob = Self.session(stack, gateways: [1, 0], listenerDevice: device)
            let bobWatch = Watcher(bob)
            defer { bobWatch.cancel() }
            await bob.start()
            let conversation = try await alice.connected { connection, _ in try await connection.createLiveConversation(name: "Kitchen") }
            let whisperer = try await alice.whisper(in: conversation.conversationId, name: "Alice")
            _ = try await bob.listen(to: conversation.conversationId, name: "Bob")

            // Bob asks, Alice lets him in, he hears her.
            try await waitUntil { aliceWatch.request(from: "Bob") != nil }
            let listenerId = try #require(aliceWatch.request(from: "Bob"))
            try await whisperer.admit(listenerId)
            try await waitUntil { bobWatch.listening.withLock { $0.contains(.admitted) } }
            try await waitUntil { aliceWatch.joins(listenerId, "Bob") == 1 }
            try await whisperer.type("hello")
            try await bobWatch.hears("hello")

            // Alice's socket goes: her session takes the Whisperer's place again on the next
            // one, and Bob, known, is let in again without anyone asking.
            await alice.networkChanged()
            try await waitUntil(timeout: .seconds(30)) { aliceWatch.connections(to: stack.websocketURL(1)) >= 1 }
            try await waitUntil { aliceWatch.joins(listenerId, "Bob") == 2 }
            try await whisperer.newline()
            try await whisperer.type("after the move")
            try await bobWatch.hears("after the move", past: ["hello"])

            // Bob's socket goes: his session offers again, is let in again, and gets the
            // whole text.
            await bob.networkChanged()
            try await waitUntil(timeout: .seconds(30)) { bobWatch.connections(to: stack.websocketURL(0)) >= 1 }
            try await waitUntil { aliceWatch.joins(listenerId, "Bob") == 3 }
            try await whisperer.type("after the move, twice")
            try await bobWatch.hears("after the move, twice", past: ["hello"])
            #expect(aliceWatch.whispering.withLock { $0.filter { if case .request = $0 { true } else { false } }.count } == 1, "asked once only")

            // Deleted, it is not taken again.
            try await alice.connected { connection, _ in try await connection.deleteLiveConversation(conversation.conversationId) }
            try await waitUntil { bobWatch.listening.withLock { $0.contains(.whispererLeft(.deleted)) } }
            await bob.stop()
            await alice.stop()
        }
    }

    /// A session with no identity, from a listen link's device only: it keeps itself
    /// connected and listens again after a reconnect, like a signed-in one; what needs an
    /// identity is refused before anything is sent.
    @Test func aListeningSessionWithNoIdentityListensAgainAfterAReconnect() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let (alice, aliceWatch, _) = try await Self.started(stack)
            defer { aliceWatch.cancel() }
            let device = try await ListenerDevice.issue(websocketURL: stack.websocketURL(1))
            let ada = TestSessions.track(
                WhisperSession(listeningWith: .listening(gateways: [stack.websocketURL(1), stack.websocketURL(0)], device: device), logger: TestServers.logger)
            )
            let adaWatch = Watcher(ada)
            defer { adaWatch.cancel() }
            await ada.start()
            #expect(ada.keys == nil)
            await #expect(throws: WhisperClientError.noIdentity) { try await ada.watchPresence(["WSP-AAAA-BBBB-CCCC"]) }
            await #expect(throws: WhisperClientError.noIdentity) { _ = try await ada.requestFloor(RandomID.uuid()) }
            await #expect(throws: WhisperClientError.noIdentity) { _ = try await ada.deleteAccount() }

            let conversation = try await alice.connected { connection, _ in try await connection.createLiveConversation(name: "Hall") }
            let whisperer = try await alice.whisper(in: conversation.conversationId, name: "Alice")
            _ = try await ada.listen(to: conversation.conversationId, name: "Ada")
            try await waitUntil { aliceWatch.request(from: "Ada") != nil }
            let listenerId = try #require(aliceWatch.request(from: "Ada"))
            try await whisperer.admit(listenerId)
            try await whisperer.type("welcome")
            try await adaWatch.hears("welcome")

            // Her socket goes: the session opens another (the next gateway) and listens
            // again; she is let in again without asking.
            await ada.networkChanged()
            try await waitUntil(timeout: .seconds(30)) { adaWatch.connections(to: stack.websocketURL(0)) >= 1 }
            try await waitUntil { aliceWatch.joins(listenerId, "Ada") == 2 }
            try await whisperer.newline()
            try await whisperer.type("still here")
            try await adaWatch.hears("still here", past: ["welcome"])
            #expect(aliceWatch.whispering.withLock { $0.filter { if case .request = $0 { true } else { false } }.count } == 1, "asked once only")
            await ada.stop()
            await alice.stop()
        }
    }

    @Test func aGatewayWhoseSubscriptionCameBackTellsItsSocketsToReconnectAndTheSessionDoes() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let (bob, watcher, _) = try await Self.started(stack)
            defer { watcher.cancel() }
            let alice = try await stack.user(on: 0)
            // The first subscription (at start) missed nothing: nobody was told anything.
            #expect(await alice.events.all(.reconnect).isEmpty)
            // The gateways' subscriptions are cut; they subscribe again at once.
            try await stack.withRedis { redis in _ = try await redis.send("CLIENT", "KILL", "TYPE", "pubsub") }
            try await waitUntil { await !alice.events.all(.reconnect).isEmpty }
            let notice = try #require(await alice.events.all(.reconnect).first?.payload(as: Reconnect.self))
            #expect(notice.reason == "frames_missed")
            #expect((0...5_000).contains(notice.retryAfterMs))
            // The session follows it by itself, as it follows a drain.
            try await waitUntil(timeout: .seconds(30)) { watcher.states.withLock { $0.filter(\.isConnected).count } >= 2 }
            await bob.stop()
        }
    }

    @Test func aCutNetworkIsNoticedByPingAndTheSessionComesBackWithWhatWaited() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let proxy = try await CuttableProxy.start(to: stack.gateways[0].port)
            defer { Task { await proxy.stop() } }
            let bob = try await stack.user(on: 1)
            var configuration = WhisperSession.Configuration(gateways: ["ws://127.0.0.1:\(proxy.port)/ws"], deviceId: RandomID.uuid(), platform: .ios)
            configuration.backoff = .init(initial: .milliseconds(100), maximum: .seconds(1))
            configuration.pingInterval = .seconds(1)
            configuration.pingTimeout = .seconds(1)
            configuration.connectTimeout = .seconds(2)
            let alice = TestSessions.track(WhisperSession(
                configuration: configuration, keys: try WhisperKeys(mnemonic: BIP39.generateMnemonic()), credentials: nil, logger: TestServers.logger
            ))
            let watcher = Watcher(alice)
            defer { watcher.cancel() }
            await alice.start()
            let url = configuration.gateways[0]
            try await waitUntil { watcher.connections(to: url) == 1 }
            let aliceId = try #require(await alice.credentials?.whisperId)
            let aliceKeys = PeerKeys(whisperId: aliceId, encPublicKey: try #require(alice.keys).encPublicKey, signPublicKey: try #require(alice.keys).signPublicKey)

            proxy.cut()
            let cutAt = ContinuousClock.now
            // The silent socket is given up within a ping interval and its timeout.
            try await waitUntil(timeout: .seconds(10)) { await alice.state != .connected(gateway: url) }
            #expect(ContinuousClock.now - cutAt < .seconds(4), "the dead socket went unnoticed for \(ContinuousClock.now - cutAt)")
            // Meanwhile both sides write: alice's message waits in her outbox, bob's in her queue.
            let mine = MessageCrypto.makeMessage(Array("sent offline".utf8), from: (aliceId, try #require(alice.keys)), to: bob.peerKeys, sessionToken: "")
            try await alice.send(mine)
            let theirs = MessageCrypto.makeMessage(Array("while you were away".utf8), from: (bob.whisperId, bob.keys), to: aliceKeys, sessionToken: bob.token)
            try await bob.connection.send(theirs)
            // It keeps trying (a dead socket is dropped, not waited on), without getting through.
            try await waitUntil(timeout: .seconds(10)) {
                watcher.states.withLock { $0.filter { if case .backingOff = $0 { true } else { false } }.count } >= 2
            }
            #expect(await alice.state != .connected(gateway: url), "connected through a cut network")

            proxy.restore()
            let restoredAt = ContinuousClock.now
            try await waitUntil(timeout: .seconds(10)) { watcher.connections(to: url) == 2 }
            // Within the backoff's bound (1 s) and a connect.
            #expect(ContinuousClock.now - restoredAt < .seconds(4))
            try await waitUntil { watcher.messages.withLock { $0.map(\.messageId) } == [theirs.messageId] }
            try await waitUntil {
                await bob.events.all(.messageReceived).compactMap { $0.payload(as: MessageReceived.self)?.messageId } == [mine.messageId]
            }
            await alice.stop()
        }
    }

    /// A gateway that takes sockets, signs them in and drops them two seconds later: the
    /// backoff never starts again (each socket was far from `healthyAfter`), so the
    /// tries come ever more slowly instead of every few hundred milliseconds.
    @Test func aGatewayThatDropsEverySocketIsTriedEverMoreSlowly() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let proxy = try await CuttableProxy.start(to: stack.gateways[0].port)
            defer { Task { await proxy.stop() } }
            proxy.dropEveryConnection(after: .seconds(2))
            var configuration = WhisperSession.Configuration(gateways: ["ws://127.0.0.1:\(proxy.port)/ws"], deviceId: RandomID.uuid(), platform: .ios)
            configuration.backoff = .init(initial: .milliseconds(100), maximum: .seconds(2))
            let session = TestSessions.track(WhisperSession(
                configuration: configuration, keys: try WhisperKeys(mnemonic: BIP39.generateMnemonic()), credentials: nil, logger: TestServers.logger
            ))
            let watcher = Watcher(session)
            defer { watcher.cancel() }
            await session.start()
            let url = configuration.gateways[0]
            try await waitUntil(timeout: .seconds(60)) { watcher.connections(to: url) >= 4 }
            await session.stop()
            let attempts = watcher.states.withLock { states in
                states.compactMap { state -> Int? in if case .backingOff(let attempt, _) = state { attempt } else { nil } }
            }
            // Every loss is one more step: 1, 2, 3, ... (a reset at each sign-in gave 1, 1, 1).
            #expect(attempts.count >= 3)
            #expect(attempts == Array(1...attempts.count), "backoff attempts \(attempts)")
        }
    }

    /// The sockets of many apps on one gateway are lost at once after they were healthy:
    /// their first tries are spread over `firstRetrySpread`, not all within the backoff's
    /// first step.
    @Test func theFirstTriesAfterHealthySocketsAreLostAreSpread() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let proxy = try await CuttableProxy.start(to: stack.gateways[0].port)
            defer { Task { await proxy.stop() } }
            var configuration = WhisperSession.Configuration(gateways: ["ws://127.0.0.1:\(proxy.port)/ws"], deviceId: "", platform: .ios)
            configuration.backoff = .init(initial: .milliseconds(100), maximum: .seconds(10))
            configuration.healthyAfter = .milliseconds(500)
            configuration.firstRetrySpread = .seconds(4)
            var watchers: [(WhisperSession, Watcher)] = []
            defer { for (_, watcher) in watchers { watcher.cancel() } }
            for _ in 0..<12 {
                configuration.deviceId = RandomID.uuid()
                let session = TestSessions.track(WhisperSession(
                    configuration: configuration, keys: try WhisperKeys(mnemonic: BIP39.generateMnemonic()), credentials: nil, logger: TestServers.logger
                ))
                watchers.append((session, Watcher(session)))
                await session.start()
            }
            let url = configuration.gateways[0]
            try await waitUntil(timeout: .seconds(60)) { watchers.allSatisfy { $0.1.connections(to: url) == 1 } }
            try await Task.sleep(for: .seconds(1))   // every socket older than healthyAfter
            let lostAt = Clock.millisecondsNow()
            proxy.cut()
            proxy.restore()
            try await waitUntil(timeout: .seconds(30)) {
                watchers.allSatisfy { $0.1.states.withLock { $0.contains { if case .backingOff = $0 { true } else { false } } } }
            }
            let delays = watchers.compactMap { _, watcher in
                watcher.states.withLock { states in
                    states.lazy.compactMap { state -> Int64? in if case .backingOff(_, let at) = state, at >= lostAt { at - lostAt } else { nil } }.first
                }
            }
            for (session, _) in watchers { await session.stop() }
            #expect(delays.count == 12)
            // Within the spread (and the time the loss took to be seen), and spread out:
            // twelve uniform draws over 4 s all within one second of each other are
            // very unlikely; the backoff's first step alone keeps them within 100 ms.
            #expect(delays.allSatisfy { $0 <= 5_000 }, "delays \(delays)")
            #expect((delays.max() ?? 0) - (delays.min() ?? 0) >= 1_000, "delays \(delays)")
        }
    }

    /// An app that does not read its events holds at most `eventBufferMax` of them: the
    /// rest are dropped (logged), and the messages among them, never acknowledged, come
    /// again with the next walks of the queue once the app reads again, each shown once.
    @Test func eventsBeyondTheBufferAreDroppedAndTheirMessagesComeAgain() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let bob = try await stack.user(on: 0)
            let url = "ws://127.0.0.1:\(stack.gateways[0].port)/ws"
            var configuration = WhisperSession.Configuration(gateways: [url], deviceId: RandomID.uuid(), platform: .ios)
            configuration.eventBufferMax = 4
            let keys = try WhisperKeys(mnemonic: BIP39.generateMnemonic())
            let logged = LoggedEvents()
            let alice = TestSessions.track(WhisperSession(
                configuration: configuration, keys: keys, credentials: nil, logger: Logger(label: "session") { _ in logged }
            ))
            await alice.start()
            try await waitUntil { await alice.state == .connected(gateway: url) }
            let aliceId = try #require(await alice.credentials?.whisperId)
            let aliceKeys = PeerKeys(whisperId: aliceId, encPublicKey: keys.encPublicKey, signPublicKey: keys.signPublicKey)
            // Nobody reads alice's events while ten messages come: past four, they are dropped.
            var sent: [String] = []
            for index in 0..<10 {
                let message = MessageCrypto.makeMessage(Array("m\(index)".utf8), from: (bob.whisperId, bob.keys), to: aliceKeys, sessionToken: bob.token)
                try await bob.connection.send(message)
                sent.append(message.messageId)
            }
            try await waitUntil { logged.contains("session_events_dropped") }
            // The app reads now: what the buffer held first, then what came since.
            let held = Mutex<[SessionEvent]>([])
            let reader = Task {
                for await event in alice.events {
                    held.withLock { $0.append(event) }
                    if case .message(let message) = event { try? await alice.acknowledge(message) }
                }
            }
            defer { reader.cancel() }
            try await waitUntil { held.withLock { $0.count } >= 4 }
            let messageIds: @Sendable ([SessionEvent]) -> [String] = { events in
                events.compactMap { event -> String? in if case .message(let message) = event { message.messageId } else { nil } }
            }
            // What was dropped is not shown until the queue is walked again.
            #expect(held.withLock { messageIds($0).count } < sent.count)
            // Each new socket walks the queue again: every message comes, each shown once.
            let expected = Set(sent)
            try await waitUntil(timeout: .seconds(60)) {
                if Set(held.withLock { messageIds($0) }) == expected { return true }
                if await alice.state == .connected(gateway: url) { await alice.networkChanged() }
                return false
            }
            let received = held.withLock { messageIds($0) }
            #expect(received.count == sent.count, "a message shown twice: \(received)")
            await alice.stop()
        }
    }

    /// The messages a logger was given, for tests that wait on a log line.
    final class LoggedEvents: LogHandler, @unchecked Sendable {
        private let lines = Mutex<[String]>([])
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .debug

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            lines.withLock { $0.append(event.message.description) }
        }

        func contains(_ message: String) -> Bool { lines.withLock { $0.contains(message) } }
    }

    /// Callers of `connected` while there is no socket: each waits its own time. One that
    /// gives up fails alone, and the others get the socket once it comes.
    @Test func callersWaitingForASocketEachWaitTheirOwnTime() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let proxy = try await CuttableProxy.start(to: stack.gateways[0].port)
            defer { Task { await proxy.stop() } }
            proxy.cut()
            var configuration = WhisperSession.Configuration(gateways: ["ws://127.0.0.1:\(proxy.port)/ws"], deviceId: RandomID.uuid(), platform: .ios)
            configuration.backoff = .init(initial: .milliseconds(100), maximum: .milliseconds(500))
            configuration.connectTimeout = .seconds(1)
            let session = TestSessions.track(WhisperSession(
                configuration: configuration, keys: try WhisperKeys(mnemonic: BIP39.generateMnemonic()), credentials: nil, logger: TestServers.logger
            ))
            await session.start()
            let patientAnswer = Mutex<Result<String, any Error>?>(nil)
            let patient = Task {
                do {
                    let id = try await session.connected(timeout: .seconds(30)) { connection, _ in await connection.whisperId ?? "" }
                    patientAnswer.withLock { $0 = .success(id) }
                } catch {
                    patientAnswer.withLock { $0 = .failure(error) }
                }
            }
            defer { patient.cancel() }
            // A hasty caller gives up while the network is down...
            await #expect(throws: WhisperClientError.timedOut) {
                try await session.connected(timeout: .milliseconds(500)) { _, _ in () }
            }
            // ...and so does one that was waiting with it, once the first is told.
            let hastyAgain = Task { try await session.connected(timeout: .milliseconds(300)) { _, _ in () } }
            await #expect(throws: WhisperClientError.timedOut) { try await hastyAgain.value }
            #expect(patientAnswer.withLock { $0 } == nil, "a caller waiting 30 s was answered once another caller's wait ended")

            proxy.restore()
            try await waitUntil { patientAnswer.withLock { $0 } != nil }
            let answer = try #require(patientAnswer.withLock { $0 })
            #expect(try answer.get() == (try #require(await session.credentials?.whisperId)))
            await session.stop()
        }
    }

    @Test func aMessageComingAgainIsShownOnceAndOneAcknowledgedOfflineLeavesTheQueueOnTheNextSocket() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let bob = try await stack.user(on: 1)
            let alice = Self.session(stack, gateways: [0])
            // This app acknowledges by hand.
            let watcher = Watcher(alice, acknowledging: false)
            defer { watcher.cancel() }
            await alice.start()
            try await waitUntil { watcher.connections(to: stack.websocketURL(0)) == 1 }
            let aliceId = try #require(await alice.credentials?.whisperId)
            let aliceKeys = PeerKeys(whisperId: aliceId, encPublicKey: try #require(alice.keys).encPublicKey, signPublicKey: try #require(alice.keys).signPublicKey)
            let first = MessageCrypto.makeMessage(Array("one".utf8), from: (bob.whisperId, bob.keys), to: aliceKeys, sessionToken: bob.token)
            try await bob.connection.send(first)
            try await waitUntil { watcher.messages.withLock { $0.count } == 1 }
            // Not acknowledged yet: the next socket's walk of the queue brings it again.
            await alice.networkChanged()
            try await waitUntil { watcher.connections(to: stack.websocketURL(0)) == 2 }
            #expect(try await stack.pendingDepth(aliceId) == 1)
            #expect(watcher.messages.withLock { $0.count } == 1, "shown twice")
            // Acknowledged while no socket is up: remembered, and sent when it comes again.
            await alice.stop()
            try await alice.acknowledge(try #require(watcher.messages.withLock { $0.first }))
            await alice.start()
            try await waitUntil { watcher.connections(to: stack.websocketURL(0)) == 3 }
            try await waitUntil { try await stack.pendingDepth(aliceId) == 0 }
            #expect(watcher.messages.withLock { $0.count } == 1)
            await alice.stop()
        }
    }

    /// A message the app stored is never shown again, after any time: the sender resends
    /// it (the same messageId) after the server forgot the first copy (its 72 hours of
    /// duplicate detection: the record of the messageId gone), and the app, restarted
    /// meanwhile with the same record of delivered messages, acknowledges the copy and does
    /// not show it.
    @Test func aMessageResentAfterTheServerForgotItIsNotShownAgainAfterARestart() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let bob = try await stack.user(on: 0)
            let keys = try WhisperKeys(mnemonic: BIP39.generateMnemonic())
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("whisper-delivered-\(UUID().uuidString).jsonl")
            defer { try? FileManager.default.removeItem(at: file) }
            let before = Self.session(stack, gateways: [0], keys: keys, delivered: FileDeliveredStore(url: file))
            let shownBefore = Watcher(before)
            defer { shownBefore.cancel() }
            await before.start()
            try await waitUntil { shownBefore.connections(to: stack.websocketURL(0)) == 1 }
            let aliceId = try #require(await before.credentials?.whisperId)
            let aliceKeys = PeerKeys(whisperId: aliceId, encPublicKey: keys.encPublicKey, signPublicKey: keys.signPublicKey)
            let messageId = RandomID.uuid()
            let message = MessageCrypto.makeMessage(Array("once".utf8), from: (bob.whisperId, bob.keys), to: aliceKeys, sessionToken: bob.token, messageId: messageId)
            try await bob.connection.send(message)
            try await waitUntil { shownBefore.messages.withLock { $0.count } == 1 }
            try await waitUntil { try await stack.pendingDepth(aliceId) == 0 }
            let credentials = await before.credentials
            await before.stop()

            // 72 hours on, the server no longer knows the messageId; Bob's outbox sends it again.
            _ = try await stack.withRedis { try await $0.send("DEL", PendingQueue.messageKey(aliceId, messageId)) }
            try await bob.connection.send(message)
            #expect(try await stack.pendingDepth(aliceId) == 1, "the server took the copy as a new message")

            // The app, restarted, with its record: the copy is acknowledged and not shown. (It
            // signs in on the other gateway, whose receipts Bob's takes: the first one's
            // memory of the first receipt, a minute long, would be gone after the 72 hours
            // this stands for.)
            let after = Self.session(stack, gateways: [1], keys: keys, credentials: credentials, delivered: FileDeliveredStore(url: file))
            let shownAfter = Watcher(after)
            defer { shownAfter.cancel() }
            await after.start()
            try await waitUntil { shownAfter.connections(to: stack.websocketURL(1)) == 1 }
            try await waitUntil { try await stack.pendingDepth(aliceId) == 0 }
            #expect(shownAfter.messages.withLock { $0.isEmpty }, "shown again")
            await after.stop()
        }
    }

    /// Two people shown different logs are told at their next message: a session sends the
    /// head it holds with every message, and compares the head each message brings with
    /// its own log. Bob's genuine head raises nothing; a head the directory signed for the
    /// same epoch over another log (as a directory keeping two views would show him) is
    /// `splitView`, naming him.
    @Test func aPeerShownAnotherLogIsASplitViewAtTheNextMessage() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let bob = try await stack.user(on: 1)
            let alice = Self.session(stack, gateways: [0])
            let watcher = Watcher(alice)
            defer { watcher.cancel() }
            await alice.start()
            try await waitUntil { watcher.connections(to: stack.websocketURL(0)) == 1 }
            let aliceId = try #require(await alice.credentials?.whisperId)
            let aliceKeys = try #require(alice.keys)
            let alicePeer = PeerKeys(whisperId: aliceId, encPublicKey: aliceKeys.encPublicKey, signPublicKey: aliceKeys.signPublicKey)
            try await KeyTransparencyTests.waitForPublication(stack)
            let (genuine, _) = try await KeyTransparencyTests.api(stack).newestHead(since: nil)

            let signer = Ed25519.KeyPair(seed: TestServers.directorySigningSeed)
            let otherLog = Array(SHA256.hash(data: Array("another log".utf8)))
            let prefixRoot = try #require(genuine.prefixRootBytes)
            let forged = DirectoryHead(
                epoch: genuine.epoch, logRoot: otherLog, prefixRoot: prefixRoot, publishedAt: genuine.publishedAt, keyId: Ed25519.keyId(signer.publicKey),
                signature: signer.sign(DirectoryHead.signedBytes(epoch: genuine.epoch, logRoot: otherLog, prefixRoot: prefixRoot, publishedAt: genuine.publishedAt))
            )
            for (text, head) in [("on the log", genuine), ("on another log", forged)] {
                try await bob.connection.send(MessageCrypto.makeMessage(Array(text.utf8), from: (bob.whisperId, bob.keys), to: alicePeer, sessionToken: bob.token, directoryHead: head))
            }
            try await waitUntil { watcher.messages.withLock { $0.count } == 2 }
            try await waitUntil { !watcher.alerts.withLock { $0.isEmpty } }
            #expect(watcher.alerts.withLock { $0 } == [.splitView(peer: bob.whisperId)])

            // Alice's own messages carry her head, signed with the rest.
            try await alice.send(MessageCrypto.makeMessage(Array("hello".utf8), from: (aliceId, aliceKeys), to: bob.peerKeys, sessionToken: ""))
            try await waitUntil { !(await bob.events.all(.messageReceived)).isEmpty }
            let received = try #require(await bob.events.all(.messageReceived).first?.payload(as: MessageReceived.self))
            #expect(received.directoryHead != nil)
            #expect(try MessageCrypto.open(received, by: (bob.whisperId, bob.keys), sender: alicePeer) == Array("hello".utf8))
            await alice.stop()
        }
    }

    @Test func aSessionRegistersAgainFromItsKeysWhenTheServerLostItAndNeverUndoesAnotherDevice() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let keys = try WhisperKeys(mnemonic: BIP39.generateMnemonic())
            let alice = Self.session(stack, gateways: [0], keys: keys)
            let watcher = Watcher(alice)
            defer { watcher.cancel() }
            await alice.start()
            try await waitUntil { watcher.connections(to: stack.websocketURL(0)) == 1 }
            let first = try #require(await alice.credentials)
            // The session store loses the session (as when Redis comes back empty): the
            // next socket registers the same identity again from the keys.
            try await stack.withRedis { redis in _ = try await SessionStore(redis: redis).revokeAll(of: first.whisperId) }
            await alice.networkChanged()
            try await waitUntil(timeout: .seconds(20)) { watcher.connections(to: stack.websocketURL(0)) == 2 }
            let second = try #require(await alice.credentials)
            #expect(second.whisperId == first.whisperId && second.sessionToken != first.sessionToken)
            #expect(watcher.credentials.withLock { $0.map(\.whisperId) } == [first.whisperId, first.whisperId])

            // Another device signs in with the same phrase: the session ends and stays ended.
            let other = WhisperConnection(url: stack.websocketURL(1), logger: TestServers.logger)
            try await other.connect()
            try await other.register(keys: keys, deviceId: RandomID.uuid(), platform: .android, whisperId: first.whisperId)
            try await waitUntil(timeout: .seconds(20)) { await alice.state == .signedOut(.replacedByNewDevice) }
            #expect(watcher.connections(to: stack.websocketURL(0)) == 2, "it reconnected after being replaced")
            await other.close()
        }
    }
}
