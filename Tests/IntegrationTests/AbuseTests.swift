import AuthService
import Foundation
import GatewayService
import NIOCore
import NIOPosix
import RouterService
import ServiceLifecycle
import Testing
import WhisperClient
import WhisperMessaging
import WhisperShared

/// Issue 13: each attack of one account (or none) on everyone else, sent for real, and
/// the limit holding while a well-behaved user on the same gateway is still served.
@Suite struct AbuseTests {
    /// Carol sends Dave a message: accepted and received, whatever the attacker does.
    private func stillServed(_ stack: MessagingStack, on gateway: Int = 0) async throws {
        let carol = try await stack.user(on: gateway)
        let dave = try await stack.user(on: 1 - gateway)
        let (sent, received) = try await carol.sendAndWaitForArrival("still here", to: dave)
        #expect(received.messageId == sent.messageId)
        await carol.connection.close()
        await dave.connection.close()
    }

    private static func reactions(keys: Int, idsEach: Int) -> [String: [String]] {
        Dictionary(uniqueKeysWithValues: (0..<keys).map { key in ("r\(key)", (0..<idsEach).map { _ in WhisperID.generate() }) })
    }

    // MARK: - Storage per user

    @Test func paddedReactionsAreRefusedAndAFullQueueRefusesItsSenders() async throws {
        try await MessagingStack.start(
            router: { $0.pendingCapacity = PendingQueue.Capacity(messages: 50, bytes: 4_000) }
        ).running { stack in
            let mallory = try await stack.user(on: 0)
            let victim = try await stack.user(on: 1)

            // 64 reactions of 256 IDs each: about 345 KB in one frame, under the frame limit.
            var padded = mallory.message("padded", to: victim)
            padded.reactions = Self.reactions(keys: 64, idsEach: 256)
            await expectRefused(.invalidPayload, "padded reactions") { try await mallory.connection.send(padded) }
            // Reactions of a sensible size still pass.
            var small = mallory.message("small reactions", to: victim)
            small.reactions = Self.reactions(keys: 2, idsEach: 3)
            try await mallory.connection.send(small)

            // The victim never acknowledges: its queue fills up to 4,000 bytes, then refuses.
            var accepted = 1
            var refused = false
            for index in 0..<40 {
                do {
                    try await mallory.connection.send(mallory.message("flood \(index)", to: victim))
                    accepted += 1
                } catch WhisperClientError.refused(let code, _) {
                    #expect(code == .rateLimited)
                    refused = true
                    break
                }
            }
            #expect(refused, "the queue cap in bytes refused a sender")
            #expect(accepted < 20)
            let held = try await stack.withRedis { try await PendingQueue(redis: $0).bytes(recipient: victim.whisperId) }
            #expect(held > 0 && held <= 4_000, "bytes held: \(held)")
            #expect(try await stack.pendingDepth(victim.whisperId) == accepted)

            // The recipient takes one: room for one more.
            let first = try #require(try await victim.events(.messageReceived).first?.payload(as: MessageReceived.self))
            try await victim.connection.acknowledge(first)
            try await waitUntil { try await stack.pendingDepth(victim.whisperId) == accepted - 1 }
            try await mallory.connection.send(mallory.message("after an acknowledgement", to: victim))
            try await stillServed(stack)
        }
    }

    @Test func aQueueIsCappedInMessages() async throws {
        try await MessagingStack.start(router: { $0.pendingCapacity = PendingQueue.Capacity(messages: 3, bytes: 1 << 20) }).running { stack in
            let mallory = try await stack.user(on: 0)
            let victim = try await stack.offlineUser(on: 1)
            // A contact (a stranger gets a share of the queue only: the next test).
            try await stack.makePeers([mallory, victim])
            _ = try await mallory.send(3, to: victim, labelled: "fill")
            await expectRefused(.rateLimited, "fourth message") { try await mallory.connection.send(mallory.message("one too many", to: victim)) }
            #expect(try await stack.pendingDepth(victim.whisperId) == 3)
            try await stillServed(stack)
        }
    }

    /// Strangers cannot silence an inbox: together they fill a fifth of a queue and each
    /// one a fiftieth (here 10 and 2 of 50), and the recipient's direct peers still fill
    /// the rest.
    @Test func strangersFillOnlyTheirShareOfAQueueAndContactsStillGetThrough() async throws {
        try await MessagingStack.start(router: {
            $0.pendingCapacity = PendingQueue.Capacity(messages: 50, bytes: 1 << 20, strangersPercent: 20, perStrangerPercent: 4)
        }).running { stack in
            let victim = try await stack.offlineUser(on: 1)
            let friend = try await stack.user(on: 0)
            try await stack.makePeers([friend, victim])
            var strangers: [TestUser] = []
            for index in 0..<6 { strangers.append(try await stack.user(on: index % 2)) }
            for stranger in strangers.prefix(5) { _ = try await stranger.send(2, to: victim, labelled: "spam") }
            await expectRefused(.rateLimited, "a third from one stranger") {
                try await strangers[0].connection.send(strangers[0].message("more", to: victim))
            }
            await expectRefused(.rateLimited, "an eleventh from strangers") {
                try await strangers[5].connection.send(strangers[5].message("more", to: victim))
            }
            // The friend fills the rest, and only then is the queue full.
            _ = try await friend.send(40, to: victim, labelled: "hello")
            #expect(try await stack.pendingDepth(victim.whisperId) == 50)
            await expectRefused(.rateLimited, "past the queue's cap") { try await friend.connection.send(friend.message("one too many", to: victim)) }
            try await stillServed(stack)
        }
    }

    /// An army of one-message strangers, each a new account, cannot push a real contact
    /// out of the recipient's peers: when the set is full the senders the recipient never
    /// wrote to leave first. Once any gateway asks Redis again (its peer memory's trust
    /// lapsed, or, here, a gateway that never saw the pair), the contact is still a
    /// contact: its message is stored beside the strangers' full share, and delivered.
    @Test func anArmyOfOneMessageStrangersCannotPushAContactOut() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 0)
            // Bob's first message was a stranger's; alice takes it off her queue.
            let (_, first) = try await bob.sendAndWaitForArrival("hi alice", to: alice)
            try await alice.connection.acknowledge(first)
            _ = try await alice.sendAndWaitForArrival("hi bob", to: bob)
            try await waitUntil { try await stack.pendingDepth(alice.whisperId) == 0 }
            await alice.connection.close()
            try await stack.waitUntilOffline(alice)

            // As many strangers as the peer set holds, one message each, eight at a time.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for batch in 0..<8 {
                    group.addTask {
                        for _ in 0..<(Peers.capacity / 8) {
                            let stranger = try await stack.user(on: batch % 2)
                            _ = try await stranger.connection.send(stranger.message("buy now", to: alice))
                            await stranger.connection.close()
                        }
                    }
                }
                try await group.waitForAll()
            }
            let (members, bobStays) = try await stack.withRedis { redis in
                (
                    try await redis.send("ZCARD", RedisKeys.peers(alice.whisperId)).int,
                    try await Peers.exchanged(alice.whisperId, with: [bob.whisperId], on: redis)
                )
            }
            #expect(members == Int64(Peers.capacity), "the strangers filled the set")
            #expect(bobStays == [true], "bob was pushed out of alice's peers")

            // Bob writes again through the other gateway, which has no memory of the pair.
            let bobElsewhere = try await stack.reconnect(bob, on: 1)
            let again = bobElsewhere.message("still your friend", to: alice)
            _ = try await bobElsewhere.connection.send(again)
            let back = try await stack.reconnect(alice, on: 0)
            var cursor: String?
            var fetched: [String] = []
            repeat {
                let page = try await back.connection.fetchPending(cursor: cursor, limit: 200)
                fetched += page.messages.map(\.messageId)
                cursor = page.nextCursor
            } while cursor != nil
            #expect(fetched.contains(again.messageId))
        }
    }

    @Test func aMessageToOneselfIsRefused() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            await expectRefused(.invalidPayload, "message to self") { try await alice.connection.send(alice.message("me", to: alice)) }
            #expect(try await stack.pendingDepth(alice.whisperId) == 0)
            try await stillServed(stack)
        }
    }

    @Test func receiptsWaitingForAnOfflineSenderAreCapped() async throws {
        try await MessagingStack.start(gateway: { $0.receiptsWaitingMax = 3 }).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let sent = try await alice.send(5, to: bob, labelled: "receipts")
            let received = try await bob.events(.messageReceived, count: 5)
            await alice.connection.close()
            try await stack.waitUntilOffline(alice)
            for frame in received {
                try await bob.connection.acknowledge(try #require(frame.payload(as: MessageReceived.self)))
            }
            try await waitUntil { try await stack.pendingDepth(bob.whisperId) == 0 }
            #expect(sent.count == 5)
            #expect(try await stack.storedReceipts(alice.whisperId) == 3, "only the newest 3 wait")
            try await stillServed(stack)
        }
    }

    /// Group events wait in a store of their own: a direct peer that changes a group
    /// over and over while one is away drops only older group events (each says the
    /// whole group), never the receipts of the messages one sent.
    @Test func aPeersGroupChangesNeverPushReceiptsOut() async throws {
        try await MessagingStack.start(routers: 1, router: { $0.receiptsWaitingMax = 10; $0.groupEventsWaitingMax = 5 }, gateway: { $0.receiptsWaitingMax = 10 }).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            try await stack.makePeers([alice, bob])
            _ = try await alice.send(3, to: bob, labelled: "read while away")
            let received = try await bob.events(.messageReceived, count: 3)
            await alice.connection.close()
            try await stack.waitUntilOffline(alice)
            for frame in received { try await bob.connection.acknowledge(try #require(frame.payload(as: MessageReceived.self))) }
            try await waitUntil { try await stack.storedReceipts(alice.whisperId) == 3 }
            // Bob, a direct peer, makes a group with Alice and renames it 20 times.
            let group = try await bob.connection.createGroup(title: "Title 0", memberIds: [alice.whisperId])
            for index in 1...20 { _ = try await bob.connection.updateGroup(group.groupId, title: "Title \(index)") }
            try await waitUntil { try await stack.storedGroupEvents(alice.whisperId) == 5 }
            #expect(try await stack.storedReceipts(alice.whisperId) == 3)

            // Back: every receipt, and the newest group events, the last one saying it all.
            let back = try await stack.reconnect(alice, on: 0)
            _ = try await back.connection.fetchPending()
            let receipts = try await back.events(.messageDelivered, count: 3)
            #expect(receipts.count == 3)
            let events = try await back.events(.groupUpdated, count: 5)
            #expect(events.last?.payload(as: GroupUpdated.self)?.title == "Title 20")
            try await stillServed(stack)
        }
    }

    // MARK: - Pages and slow readers

    @Test func pagesStopAtTheirByteBudget() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.offlineUser(on: 1)
            try await stack.makePeers([alice, bob])
            // About 11 KB each with their reactions: 40 of them are far over one page's budget.
            var sent: Set<String> = []
            for index in 0..<40 {
                var message = alice.message("big \(index)", to: bob)
                message.reactions = Self.reactions(keys: 2, idsEach: 256)
                try await alice.connection.send(message)
                sent.insert(message.messageId)
            }
            let back = try await stack.reconnect(bob, on: 1)
            var seen: Set<String> = []
            var cursor: String?
            var pages = 0
            repeat {
                let frame = try await back.connection.request(
                    FetchPending(sessionToken: bob.token, .init(cursor: cursor, limit: Limits.FETCH_PENDING_LIMIT_MAX))
                )
                let page = try #require(frame.payload(as: PendingMessages.self))
                let bodies = page.messages.map { (try? JSONEncoder().encode($0))?.count ?? 0 }.reduce(0, +)
                #expect(!page.messages.isEmpty)
                #expect(bodies <= Limits.FETCH_PENDING_MAX_BYTES + Limits.MAX_STORED_MESSAGE_BYTES, "page of \(bodies) bytes")
                #expect(page.messages.count < 40, "a page stops at its byte budget, not at limit")
                seen.formUnion(page.messages.map(\.messageId))
                cursor = page.nextCursor
                pages += 1
            } while cursor != nil && pages < 20
            #expect(seen == sent, "walking the pages gives every message")
            #expect(pages >= 2)
            try await stillServed(stack)
        }
    }

    // MARK: - Limits at the edge

    @Test func aReceiptFloodIsCutAtTheGatewayAndRepeatsAreNotPassedOn() async throws {
        try await MessagingStack.start(gateway: { $0.limits[.receiptsPerIdentity] = RateLimitRule(capacity: 8, period: .seconds(60)) }).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)

            // One real message, then the same receipts over and over: passed on once each.
            let (_, received) = try await alice.sendAndWaitForArrival("read me", to: bob)
            for _ in 0..<2 { try await bob.connection.acknowledge(received, status: .delivered) }
            for _ in 0..<3 { try await bob.connection.acknowledge(received, status: .read) }
            let delivered = try await alice.events(.messageDelivered, count: 2)
            let before = try await stack.routerStreamLength()

            // Random messageIds: 3 more fit the bucket of 8, then each is refused at the edge.
            for _ in 0..<12 {
                try await bob.connection.sendOnly(DeliveryReceipt(
                    sessionToken: bob.token, .init(messageId: RandomID.uuid(), from: bob.whisperId, to: alice.whisperId,
                    status: .read, timestamp: Clock.millisecondsNow())
                ))
            }
            try await bob.events(.error, count: 9)
            #expect(try await stack.routerStreamLength() == before, "receipts never enter the router stream")
            // Frames of a socket are served in order: once the ping is answered every receipt
            // above was handled, and none of the repeats was passed on.
            _ = try await bob.connection.ping()
            #expect(await bob.events.all(.error).count == 9)
            #expect(await alice.events.all(.messageDelivered).count == delivered.count)
            let statuses = try delivered.map { try #require($0.payload(as: MessageDelivered.self)).status }
            #expect(Set(statuses) == [.delivered, .read])
            try await stillServed(stack)
        }
    }

    @Test func fetchesAreChargedAtTheGatewayPerIdentity() async throws {
        try await MessagingStack.start(gateway: { $0.limits[.fetchPerIdentity] = RateLimitRule(capacity: 2, period: .seconds(60)) }).running { stack in
            let alice = try await stack.user(on: 0)
            _ = try await alice.connection.fetchPending()
            _ = try await alice.connection.fetchPending()
            let before = try await stack.routerStreamLength()
            await expectRefused(.rateLimited, "third fetch") { _ = try await alice.connection.fetchPending() }
            #expect(try await stack.routerStreamLength() == before, "the refused fetch never reached the stream")
            try await stillServed(stack)
        }
    }

    @Test func sessionFramesAreChargedPerIdentityOnEveryGateway() async throws {
        try await MessagingStack.start(gateway: { $0.limits[.controlPerIdentity] = RateLimitRule(capacity: 2, period: .seconds(60)) }).running { stack in
            let alice = try await stack.user(on: 0)
            try await alice.connection.updateTokens(pushToken: .set("token-1"))
            try await alice.connection.updateTokens(pushToken: .set("token-2"))
            await expectRefused(.rateLimited, "third on the first gateway") { try await alice.connection.updateTokens(pushToken: .set("token-3")) }
            // The same identity on the other gateway shares the bucket.
            let elsewhere = try await stack.reconnect(alice, on: 1)
            await expectRefused(.rateLimited, "fourth, on the other gateway") { _ = try await elsewhere.connection.refreshSession() }
            try await stillServed(stack)
        }
    }

    @Test func unknownRecipientsAreRememberedNotQueriedEachTime() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let alice = try await stack.user(on: 0)
            let nobody = TestUser(whisperId: WhisperID.generate(), keys: alice.keys, token: "", connection: alice.connection, events: alice.events)
            func queries() async throws -> Int {
                let text = try await stack.metricsText(of: stack.routers)
                let line = text.split(separator: "\n").first { $0.hasPrefix("whisper_identity_queries_total") }
                return line.flatMap { $0.split(separator: " ").last }.flatMap { Int(Double($0) ?? -1) } ?? 0
            }
            await expectRefused(.notFound, "first try") { try await alice.connection.send(alice.message("hello?", to: nobody)) }
            let after = try await queries()
            for index in 0..<5 {
                await expectRefused(.notFound, "again \(index)") { try await alice.connection.send(alice.message("hello? \(index)", to: nobody)) }
            }
            #expect(try await queries() == after, "an unknown recipient costs no query while remembered")
            try await stillServed(stack)
        }
    }

    // MARK: - Identities

    @Test func namingAnotherIdentityDoesNotLockItOut() async throws {
        try await MessagingStack.start(auth: { $0.limits[.registerPerIdentity] = RateLimitRule(capacity: 2, period: .seconds(60)) }).running { stack in
            let victim = try await stack.user(on: 0)
            let attacker = WhisperConnection(url: "ws://127.0.0.1:\(stack.gateways[1].port)/ws", logger: TestServers.logger)
            try await attacker.connect()
            let attackerKeys = try WhisperKeys(mnemonic: BIP39.generateMnemonic())
            for _ in 0..<6 {
                _ = try await attacker.request(RegisterBegin(cryptoVersion: 2, .init(whisperId: victim.whisperId, deviceId: RandomID.uuid(), platform: .ios)))
            }
            for _ in 0..<3 {
                await expectRefused(.authFailed, "the attacker's keys are not the victim's") {
                    try await attacker.register(keys: attackerKeys, deviceId: RandomID.uuid(), platform: .android, whisperId: victim.whisperId)
                }
            }
            // The victim signs in again (its first successful proof after registering).
            let again = WhisperConnection(url: "ws://127.0.0.1:\(stack.gateways[1].port)/ws", logger: TestServers.logger)
            try await again.connect()
            let ack = try await again.register(keys: victim.keys, deviceId: RandomID.uuid(), platform: .ios, whisperId: victim.whisperId)
            #expect(ack.whisperId == victim.whisperId)
            // Its own successful sign-ins do count: the third within the minute is limited.
            let third = WhisperConnection(url: "ws://127.0.0.1:\(stack.gateways[0].port)/ws", logger: TestServers.logger)
            try await third.connect()
            await expectRefused(.rateLimited, "third sign-in") {
                try await third.register(keys: victim.keys, deviceId: RandomID.uuid(), platform: .ios, whisperId: victim.whisperId)
            }
            try await stillServed(stack)
        }
    }

    @Test func aDeviceIdCannotBeMovedToAnotherIdentity() async throws {
        try await MessagingStack.start().running { stack in
            let aliceKeys = try WhisperKeys(mnemonic: BIP39.generateMnemonic())
            let device = RandomID.uuid()
            let alice = WhisperConnection(url: "ws://127.0.0.1:\(stack.gateways[0].port)/ws", logger: TestServers.logger)
            try await alice.connect()
            let aliceAck = try await alice.register(keys: aliceKeys, deviceId: device, platform: .ios)
            let mallory = WhisperConnection(url: "ws://127.0.0.1:\(stack.gateways[1].port)/ws", logger: TestServers.logger)
            try await mallory.connect()
            await expectRefused(.forbidden, "borrowed deviceId") {
                try await mallory.register(keys: try WhisperKeys(mnemonic: BIP39.generateMnemonic()), deviceId: device, platform: .android)
            }
            // Alice's session and device are untouched: she is still signed in on it.
            let bob = try await stack.user(on: 1)
            let message = MessageCrypto.makeMessage(
                Array("still mine".utf8), from: (aliceAck.whisperId, aliceKeys), to: bob.peerKeys, sessionToken: aliceAck.sessionToken
            )
            try await alice.send(message)
            #expect(await alice.closeCode == nil)
            // And the same identity may sign in on it again.
            let back = WhisperConnection(url: "ws://127.0.0.1:\(stack.gateways[1].port)/ws", logger: TestServers.logger)
            try await back.connect()
            #expect(try await back.register(keys: aliceKeys, deviceId: device, platform: .ios, whisperId: aliceAck.whisperId).whisperId == aliceAck.whisperId)
            try await stillServed(stack)
        }
    }

    @Test func theRegistrationProofIsDomainSeparatedFromVersion2() async throws {
        try await MessagingStack.start().running { stack in
            let connection = WhisperConnection(url: "ws://127.0.0.1:\(stack.gateways[0].port)/ws", logger: TestServers.logger)
            try await connection.connect()
            let keys = try WhisperKeys(mnemonic: BIP39.generateMnemonic())
            let device = RandomID.uuid()
            func attempt(claiming version: Int, signing signedVersion: Int) async throws -> ServerFrame {
                let challenge = try #require(try await connection.request(RegisterBegin(.init(deviceId: device, platform: .ios))).payload(as: RegisterChallenge.self))
                let bytes = [UInt8](try #require(Data(base64Encoded: challenge.challenge)))
                return try await connection.request(RegisterProof(
                    cryptoVersion: version, .init(challengeId: challenge.challengeId, deviceId: device, platform: .ios,
                    encPublicKey: Data(keys.encPublicKey).base64EncodedString(), signPublicKey: Data(keys.signPublicKey).base64EncodedString(),
                    signature: Data(keys.proveChallenge(bytes, cryptoVersion: signedVersion)).base64EncodedString())
                ))
            }
            // A bare-challenge signature is no proof under version 2, and the reverse.
            await expectRefused(.authFailed, "v1 signature claimed as v2") { _ = try await attempt(claiming: 2, signing: 1) }
            await expectRefused(.authFailed, "v2 signature claimed as v1") { _ = try await attempt(claiming: 1, signing: 2) }
            #expect(try await attempt(claiming: 2, signing: 2).type == .registerAck)
            #expect(try await attempt(claiming: 1, signing: 1).type == .registerAck, "version 1 is still offered")
            try await stillServed(stack)
        }
    }

    // MARK: - Connections

    @Test func slowHeadersAndSocketsWithoutASessionAreClosed() async throws {
        try await MessagingStack.start(gateway: {
            $0.handshakeTimeout = .seconds(1)
            $0.authenticationDeadline = .seconds(2)
        }).running { stack in
            let signedIn = try await stack.user(on: 0)
            // Headers that never end.
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(host: "127.0.0.1", port: stack.gateways[0].port).get()
            try await channel.writeAndFlush(channel.allocator.buffer(string: "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"))
            try await waitUntil { !channel.isActive }
            // A WebSocket that never signs in.
            let idle = WhisperConnection(url: "ws://127.0.0.1:\(stack.gateways[0].port)/ws", logger: TestServers.logger)
            try await idle.connect()
            try await waitUntil { await idle.closeCode != nil }
            #expect(await idle.closeCode == .some(4004))
            // The signed-in socket outlives both deadlines.
            #expect(await signedIn.connection.closeCode == nil)
            _ = try await signedIn.connection.ping()
            try await stillServed(stack)
        }
    }

    /// Connections of any kind are capped per instance (by default by the open-file
    /// limit): one past the cap is closed on accept, those within it are untouched,
    /// and room comes back as they close. Clients cannot use up the descriptors.
    @Test func connectionsPastTheCapAreClosedOnAccept() async throws {
        try await MessagingStack.start(gateway: {
            $0.maxConnections = 4
            $0.handshakeTimeout = .seconds(60)
        }).running { stack in
            let port = stack.gateways[0].port
            func open() async throws -> any Channel {
                try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(host: "127.0.0.1", port: port).get()
            }
            // Six connections against a cap of four (the stack's own HTTP client may hold
            // one more): at least two are closed at once, and never more than four stay.
            var held: [any Channel] = []
            for _ in 0..<6 { held.append(try await open()) }
            try await waitUntil { held.filter { !$0.isActive }.count >= 2 }
            let socket = WhisperConnection(url: "ws://127.0.0.1:\(port)/ws", logger: TestServers.logger)
            await #expect(throws: (any Error).self) { try await socket.connect() }
            let stillOpen = held.filter(\.isActive).count
            #expect(stillOpen >= 3 && stillOpen <= 4, "connections within the cap stay open: \(stillOpen)")
            let metrics = try await stack.metricsText(of: [stack.gateways[0]])
            #expect(metrics.contains("whisper_gateway_connections_refused_total"))
            for channel in held { try? await channel.close() }
            try await waitUntil {
                let again = WhisperConnection(url: "ws://127.0.0.1:\(port)/ws", logger: TestServers.logger)
                guard (try? await again.connect()) != nil else { return false }
                await again.close()
                return true
            }
            try await stillServed(stack)
        }
    }

    @Test func socketsPerAddressAreCapped() async throws {
        try await MessagingStack.start(gateway: { $0.maxSocketsPerAddress = 2 }).running { stack in
            let first = try await stack.user(on: 0)
            let second = WhisperConnection(url: "ws://127.0.0.1:\(stack.gateways[0].port)/ws", logger: TestServers.logger)
            try await second.connect()
            let third = WhisperConnection(url: "ws://127.0.0.1:\(stack.gateways[0].port)/ws", logger: TestServers.logger)
            await #expect(throws: (any Error).self) { try await third.connect() }
            let answer = try await HTTP.get("\(stack.gateways[0].baseURL)/ws")
            #expect(answer.status == 429)
            // One closes: room again.
            await second.close()
            try await waitUntil { (try await HTTP.get("\(stack.gateways[0].baseURL)/ws")).status == 400 }
            let fourth = WhisperConnection(url: "ws://127.0.0.1:\(stack.gateways[0].port)/ws", logger: TestServers.logger)
            try await fourth.connect()
            await fourth.close()
            _ = try await first.connection.ping()
            // The other gateway counts its own sockets.
            try await stillServed(stack, on: 1)
        }
    }

    // MARK: - Bad cursors, tokens at rest, start-up

    @Test func cursorsRedisWouldRefuseAreBadInput() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            for cursor in ["18446744073709551616-0", "18446744073709551615-18446744073709551615", "1-2-3", "abc", "-1"] {
                await expectRefused(.invalidPayload, cursor) { _ = try await alice.connection.fetchPending(cursor: cursor) }
            }
            #expect(try await alice.connection.fetchPending(cursor: "18446744073709551615-0").messages.isEmpty)
            try await waitUntil { try await stack.unacknowledgedEntries() == 0 }
            try await stillServed(stack)
        }
    }

    @Test func theRouterStreamHoldsNoSessionTokens() async throws {
        // No router: the entries stay in the stream as the gateways wrote them (group
        // copies, whose group only a router checks, and a fetch).
        try await MessagingStack.start(routers: 0).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let groupId = "grp-\(RandomID.uuid())"
            try await alice.connection.sendOnly(alice.copy("no tokens at rest", to: bob, in: groupId))
            try await alice.connection.sendOnly(alice.copy("nor here", to: bob, in: groupId))
            try await bob.connection.sendOnly(DeliveryReceipt(
                sessionToken: bob.token, .init(messageId: RandomID.uuid(), from: bob.whisperId, to: alice.whisperId,
                status: .delivered, timestamp: Clock.millisecondsNow())
            ))
            try await bob.connection.sendOnly(FetchPending(sessionToken: bob.token, .init(limit: 10)))
            // The receipt is served by the gateway and never enters the stream.
            try await waitUntil { try await stack.routerStreamBacklog() == 3 }
            let entries = try await stack.withRedis { try await $0.send("XRANGE", RouterStream.key, "-", "+").array ?? [] }
            #expect(entries.count == 3)
            for entry in entries {
                let fields = entry.array?.last?.array?.compactMap(\.bytes) ?? []
                let text = fields.map { String(decoding: $0, as: UTF8.self) }.joined(separator: " ")
                #expect(text.contains("payload"))
                #expect(!text.contains("sessionToken"))
                #expect(!text.contains(alice.token) && !text.contains(bob.token))
            }
        }
    }

    /// Redis is copied to disk (the append-only file, dumps, replicas): no session token
    /// may be in it, as a key or as a value, whatever the sessions went through.
    @Test func noSessionTokenIsKeptInRedis() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            _ = try await alice.sendAndWaitForArrival("tokens", to: bob)
            let refreshed = try await alice.connection.refreshSession()
            // A second login of bob's identity replaces his session.
            let again = try await ModerationTests.recover(bob, on: 0, stack: stack)
            let tokens = [alice.token, refreshed.sessionToken, bob.token, again.token]
            // Each live session is findable, by the digest of its token only.
            #expect(try await stack.withRedis { try await SessionStore(redis: $0).lookup(refreshed.sessionToken)?.whisperId } == alice.whisperId)
            #expect(try await stack.withRedis { try await SessionStore(redis: $0).lookup(alice.token) } == nil)
            let everything = try await stack.withRedis { redis -> String in
                var text = ""
                for key in (try await redis.send("KEYS", "*").array ?? []).compactMap(\.string) {
                    text += key + "\n"
                    let type = try await redis.send("TYPE", key).string ?? ""
                    let dump: RESPValue = switch type {
                    case "string": try await redis.send("GET", key)
                    case "hash": try await redis.send("HGETALL", key)
                    case "stream": try await redis.send("XRANGE", key, "-", "+")
                    case "zset": try await redis.send("ZRANGE", key, 0, -1, "WITHSCORES")
                    case "list": try await redis.send("LRANGE", key, 0, -1)
                    case "set": try await redis.send("SMEMBERS", key)
                    default: .null
                    }
                    text += Self.flatten(dump) + "\n"
                }
                return text
            }
            #expect(everything.contains("session:{"))
            for token in tokens { #expect(!everything.contains(token)) }
        }
    }

    static func flatten(_ value: RESPValue) -> String {
        if let array = value.array { return array.map(flatten).joined(separator: " ") }
        return value.bytes.map { String(decoding: $0, as: UTF8.self) } ?? value.int.map(String.init) ?? ""
    }

    @Test func handledEntriesLeaveTheRouterStream() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let groupId = try await stack.streamGroup(alice, [bob])
            for index in 0..<20 { _ = try await alice.connection.send(alice.copy("routed \(index)", to: bob, in: groupId)) }
            let received = try await bob.events(.messageReceived, count: 20)
            for frame in received { try await bob.connection.acknowledge(try #require(frame.payload(as: MessageReceived.self))) }
            try await waitUntil { try await stack.pendingDepth(bob.whisperId) == 0 }
            #expect(try await stack.routerStreamLength() >= 20, "the messages went through the stream (their receipts do not)")
            // Acknowledged and deleted: no routed ciphertext stays in the stream.
            try await waitUntil { try await stack.routerStreamBacklog() == 0 }
        }
    }

    @Test func anEmptyInternalTokenStopsTheStart() async throws {
        let database = try await TestDatabases.shared.make()
        defer { TestDatabases.shared.release(database) }
        var settings = TestServers.authSettings(database)
        settings.internalToken = ""
        let group = buildAuth(settings: settings, logger: TestServers.logger).assembly.makeGroup(handleSignals: false)
        await #expect(throws: SettingsError.self) { try await group.run() }
        var gatewaySettings = TestServers.gatewaySettings(database, authPort: 1)
        gatewaySettings.internalToken = ""
        let gateway = buildGateway(settings: gatewaySettings, logger: TestServers.logger).assembly.makeGroup(handleSignals: false)
        await #expect(throws: SettingsError.self) { try await gateway.run() }
    }
}
