import AsyncHTTPClient
import Crypto
import Foundation
import HTTPTypes
@testable import GatewayService
import PostgresNIO
import Synchronization
import Testing
import WhisperClient
import WhisperShared

/// Live text end to end (docs/protocol.md section 13): an SDK Whisperer and SDK
/// listeners on two gateways, real Redis and Postgres; what each side receives is read
/// off its socket.
@Suite struct LiveTextTests {
    @Test func theWholeSequenceThenARejoinThatSkipsTheOffer() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let owner = try await stack.user(on: 0)
            let conversation = try await owner.connection.createLiveConversation(name: "Kitchen table")
            let whisperer = try await LiveHarness.whisperer(owner, conversation, stack: stack, on: 0)

            let device = try await ListenerDevice.issue(websocketURL: stack.websocketURL(1))
            let ada = try await LiveHarness.listener(device: device, conversation, name: "Ada", stack: stack, on: 1)
            // Offer → whisper offer → request → authorization → joining.
            try await whisperer.record.waitFor { $0 == .arrived(listenerId: device.deviceId, known: false, name: nil) }
            try await ada.record.waitFor { $0 == .offered(conversationName: "Kitchen table", whispererName: "Sam") }
            try await whisperer.record.waitFor { $0 == .request(listenerId: device.deviceId, name: "Ada") }
            try await whisperer.side.admit(device.deviceId)
            try await ada.record.waitFor { $0 == .admitted }
            try await whisperer.record.waitFor { $0 == .joined(listenerId: device.deviceId, name: "Ada") }

            // Keystrokes, a return, a revision.
            for text in ["H", "He", "Hel", "Hello"] { try await whisperer.side.type(text) }
            try await whisperer.side.newline()
            for text in ["Wor", "Wo", "Wa", "Wat"] { try await whisperer.side.type(text) }
            try await ada.record.waitFor { if case .text(let t) = $0 { t.past == ["Hello"] && t.live == "Wat" } else { false } }
            // The server relayed ciphertext only: no packet it delivered holds the text.
            let delivered = await ada.record.frames(.liveContent)
            #expect(!delivered.isEmpty && delivered.allSatisfy { !String(decoding: ServerFrameCodec.encode($0.payload(as: LiveContent.self)!), as: UTF8.self).contains("Hello") })

            // The places lapse with their gateway (renewed while it runs): the key has a TTL.
            let placesTTL = try await stack.withRedis { try await $0.send("PTTL", RedisKeys.liveSockets(conversation.conversationId)).int ?? 0 }
            #expect(placesTTL > 0 && placesTTL <= Int64(LiveRelay.placeTTL.milliseconds))
            // The listener's socket goes: the Whisperer is told it left.
            await ada.connection.close()
            try await whisperer.record.waitFor { $0 == .left(listenerId: device.deviceId, reason: .leave) }

            // Rejoin: the same device is recognised from its offer and let in at once
            // (steps 1, 4.1 and 5), and gets the text so far.
            let again = try await LiveHarness.listener(device: device, conversation, name: "Ada", stack: stack, on: 0)
            try await whisperer.record.waitFor { $0 == .arrived(listenerId: device.deviceId, known: true, name: "Ada") }
            try await again.record.waitFor { $0 == .admitted }
            try await again.record.waitFor { if case .text(let t) = $0 { t.past == ["Hello"] && t.live == "Wat" } else { false } }
            #expect(await again.record.count { if case .offered = $0 { true } else { false } } == 0, "a known listener is not offered the conversation again")
            #expect(await whisperer.record.count { $0 == .request(listenerId: device.deviceId, name: "Ada") } == 1)
            let kept = try await LiveHarness.kept(conversation, stack: stack)
            #expect(kept == ["Ada"])
        }
    }

    @Test func onlyAuthorizedListenersReceiveContent() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let owner = try await stack.user(on: 0)
            let conversation = try await owner.connection.createLiveConversation(name: "Clinic")
            let whisperer = try await LiveHarness.whisperer(owner, conversation, stack: stack, on: 0)
            let ada = try await LiveHarness.listener(conversation, name: "Ada", stack: stack, on: 1)
            let bo = try await LiveHarness.listener(conversation, name: "Bo", stack: stack, on: 0)
            let eve = try await LiveHarness.listener(conversation, name: "Eve", stack: stack, on: 1)
            for listener in [ada, bo, eve] {
                try await whisperer.record.waitFor { $0 == .request(listenerId: listener.id, name: listener.name) }
            }
            try await whisperer.side.admit(ada.id)
            try await whisperer.side.admit(bo.id)
            try await ada.record.waitFor { $0 == .admitted }
            try await bo.record.waitFor { $0 == .admitted }
            try await whisperer.record.waitFor { $0 == .joined(listenerId: bo.id, name: "Bo") }
            try await whisperer.record.waitFor { $0 == .joined(listenerId: ada.id, name: "Ada") }

            // Eve was never let in: joining is refused, and her client cannot send content.
            await expectRefused(.forbidden, "join without authorization") { _ = try await eve.connection.request(LiveJoining(.init(conversationId: conversation.conversationId))) }
            await expectRefused(.forbidden, "listener packet before joining") {
                _ = try await eve.connection.request(LiveListenerPacket(.init(conversationId: conversation.conversationId, keyId: 1, packet: Data(count: 40).base64EncodedString())))
            }
            // Nor act as the Whisperer: no session, or another identity's.
            await expectRefused(.notRegistered, "whisperer frame from a listener socket") {
                _ = try await eve.connection.request(LivePacket(sessionToken: String(repeating: "A", count: 43), .init(conversationId: conversation.conversationId, keyId: 1, packet: Data(count: 40).base64EncodedString())))
            }
            let stranger = try await stack.user(on: 1)
            await expectRefused(.notFound, "another identity's whisper offer") {
                _ = try await stranger.connection.request(LiveWhisperOffer(sessionToken: stranger.token, .init(conversationId: conversation.conversationId, whispererName: "Mallory")))
            }

            try await whisperer.side.type("before")
            try await ada.record.waitFor { if case .text(let t) = $0 { t.live == "before" } else { false } }
            try await bo.record.waitFor { if case .text(let t) = $0 { t.live == "before" } else { false } }

            // Ada is let go: told so, forgotten, and sent nothing more; Bo gets a new key.
            let keyBefore = await whisperer.side.keyId
            try await whisperer.side.refuse(ada.id)
            try await ada.record.waitFor { $0 == .removed }
            #expect(await whisperer.side.keyId == keyBefore + 1)
            let adaPackets = await ada.record.frames(.liveContent).count
            try await whisperer.side.type("after")
            try await bo.record.waitFor { if case .text(let t) = $0 { t.live == "after" } else { false } }
            #expect(await bo.record.frames(.liveAuthorized).last?.payload(as: LiveAuthorized.self)?.keyId == keyBefore + 1)
            // Bo has had "after"; what went out with it to Ada and Eve has had as long.
            try await whisperer.side.type("after all")
            try await bo.record.waitFor { if case .text(let t) = $0 { t.live == "after all" } else { false } }
            #expect(await ada.record.frames(.liveContent).count == adaPackets, "a deauthorized listener receives nothing more")
            #expect(await eve.record.frames(.liveContent).isEmpty, "a listener never let in receives nothing")
            // Her client cannot get back in by itself either.
            await expectRefused(.notFound, "join after deauthorization (no place)") { _ = try await ada.connection.request(LiveJoining(.init(conversationId: conversation.conversationId))) }
            _ = try await ada.connection.request(LiveListenOffer(.init(conversationId: conversation.conversationId, publicKey: LiveHarness.publicKey())))
            await expectRefused(.forbidden, "join after deauthorization") { _ = try await ada.connection.request(LiveJoining(.init(conversationId: conversation.conversationId))) }
        }
    }

    /// Authorization comes before the place: a device the Whisperer never let in that
    /// sends `live_joining` over and over while content flows never holds a joined place,
    /// not even for the moment of a lookup, so no content reaches it.
    @Test func joiningWithoutAuthorizationNeverReceivesContent() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let (_, conversation, whisperer, ada) = try await LiveHarness.oneJoined(stack)
            let eve = try await LiveHarness.listener(conversation, name: "Eve", stack: stack, on: 1)
            try await whisperer.record.waitFor { $0 == .request(listenerId: eve.id, name: "Eve") }
            async let typed: String = Self.typeAway(whisperer, keystrokes: 300)
            for _ in 0..<20 {
                await expectRefused(.forbidden, "joining uninvited") {
                    _ = try await eve.connection.request(LiveJoining(.init(conversationId: conversation.conversationId)))
                }
            }
            let last = try await typed
            try await ada.record.waitFor { if case .text(let t) = $0 { t.live == last } else { false } }
            #expect(await eve.record.frames(.liveContent).isEmpty, "content reached a device that was never let in")
        }
    }

    /// Listener devices are free to make and each carries a socket past the sign-in
    /// deadline, so new ones are bounded per address (here 3): past it the endpoint says
    /// 429 and the listen page sets no new cookie.
    @Test func newListenerDevicesAreBoundedPerAddress() async throws {
        try await MessagingStack.start(routers: 0, gateway: { $0.limits[.liveDevicesPerAddress] = RateLimitRule(capacity: 3, period: .seconds(3_600)) }).running { stack in
            let url = stack.websocketURL(0)
            for _ in 0..<3 { _ = try await ListenerDevice.issue(websocketURL: url) }
            do {
                _ = try await ListenerDevice.issue(websocketURL: url)
                Issue.record("a fourth device from one address")
            } catch WhisperAPIError.refused(let status, _, _) {
                #expect(status == 429)
            }
            var request = HTTPClientRequest(url: "\(stack.gateways[0].baseURL)/listen/\(RandomID.uuid())")
            request.method = .GET
            let page = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
            #expect(page.status == .ok)
            #expect(page.headers["Set-Cookie"].isEmpty, "a new cookie past the bound")
        }
    }

    /// A listener cookie counts only on a socket opened from the gateway's own pages:
    /// `SameSite=Strict` sends it along from a sibling host's page too, whose upgrade
    /// names that page in `Origin`. Such a socket is admitted but holds no device.
    @Test func aListenerCookieCountsOnlyFromTheGatewaysOwnPages() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let url = stack.websocketURL(0)
            let device = try await ListenerDevice.issue(websocketURL: url)
            let offer = try ClientFrameCodec.encode(LiveListenOffer(.init(conversationId: RandomID.uuid(), publicKey: LiveHarness.publicKey())))
            func answer(origin: String?) async throws -> ErrorCode? {
                var headers: HTTPFields = [.cookie: "\(ListenerDevice.cookieName)=\(device.cookie)"]
                if let origin { headers[.origin] = origin }
                let answered = Mutex<ErrorCode?>(nil)
                try await WebSocketTest.connect(url, headers: headers) { socket in
                    try await socket.send(String(decoding: offer, as: UTF8.self))
                    let frame = try await socket.receive()
                    answered.withLock { $0 = frame.payload(as: ErrorPayload.self)?.code }
                    try await socket.outbound.close(.normalClosure, reason: nil)
                }
                return answered.withLock { $0 }
            }
            // From its own pages (any port: cookies know none), or from a client that is
            // no browser, the device is there: the offer reaches the conversation lookup.
            let port = stack.gateways[0].port
            for origin in ["http://127.0.0.1:\(port)", "https://127.0.0.1", nil] {
                #expect(try await answer(origin: origin) == .notFound, "from \(origin ?? "no origin")")
            }
            // From a sibling host's page, or a sandboxed one, there is no device.
            for origin in ["http://sibling.127.0.0.1.example:\(port)", "https://evil.example", "null"] {
                #expect(try await answer(origin: origin) == .notRegistered, "from \(origin)")
            }
        }
    }

    /// Anyone with the link can offer, but the offers are charged to each device (and
    /// address), not to the conversation: 40 strangers' devices arriving at once do not
    /// keep out a listener the Whisperer let in before.
    @Test func strangersOffersDoNotKeepOutAListenerLetInBefore() async throws {
        try await MessagingStack.start(routers: 0, gateway: {
            $0.limits[.liveDevicesPerAddress] = RateLimitRule(capacity: 1_000, period: .seconds(3_600))
        }).running { stack in
            let owner = try await stack.user(on: 0)
            let conversation = try await owner.connection.createLiveConversation(name: "Crowded")
            let whisperer = try await LiveHarness.whisperer(owner, conversation, stack: stack, on: 0)
            let device = try await ListenerDevice.issue(websocketURL: stack.websocketURL(1))
            let ada = try await LiveHarness.listener(device: device, conversation, name: "Ada", stack: stack, on: 1)
            try await whisperer.record.waitFor { $0 == .request(listenerId: ada.id, name: "Ada") }
            try await whisperer.side.admit(ada.id)
            try await whisperer.record.waitFor { $0 == .joined(listenerId: ada.id, name: "Ada") }
            await ada.connection.close()

            for index in 0..<40 {
                let stranger = WhisperConnection(
                    url: stack.websocketURL(index % 2), listenerDevice: try await ListenerDevice.issue(websocketURL: stack.websocketURL(index % 2)),
                    logger: TestServers.logger
                )
                try await stranger.connect()
                _ = try await stranger.request(LiveListenOffer(.init(conversationId: conversation.conversationId, publicKey: LiveHarness.publicKey())))
            }
            let back = try await LiveHarness.listener(device: device, conversation, name: "Ada", stack: stack, on: 1)
            try await back.record.waitFor { $0 == .admitted }
        }
    }

    /// A listener device's socket needs no session only while it holds a place: one that
    /// holds none at the sign-in deadline is closed (4004), so devices cannot keep idle
    /// sockets open; one that offered stays.
    @Test func aListenerSocketWithoutAPlaceIsClosedAtTheSignInDeadline() async throws {
        try await MessagingStack.start(routers: 0, gateway: { $0.authenticationDeadline = .seconds(2) }).running { stack in
            let owner = try await stack.user(on: 0)
            let conversation = try await owner.connection.createLiveConversation(name: "Deadline")
            let idle = WhisperConnection(
                url: stack.websocketURL(1), listenerDevice: try await ListenerDevice.issue(websocketURL: stack.websocketURL(1)), logger: TestServers.logger
            )
            try await idle.connect()
            let listening = try await LiveHarness.listener(conversation, name: "Ada", stack: stack, on: 1)
            try await waitUntil(timeout: .seconds(10)) { await idle.closeCode != nil }
            #expect(await idle.closeCode == .some(4004))
            _ = try await listening.connection.ping()
            #expect(await listening.connection.closeCode == nil, "a listener holding a place stays")
        }
    }

    /// Types `keystrokes` characters one at a time; what the text is at the end.
    private static func typeAway(_ whisperer: LiveHarness.Whisperer, keystrokes: Int) async throws -> String {
        var text = ""
        for index in 0..<keystrokes {
            text = index % 40 == 39 ? "" : text + "x"
            try await whisperer.side.type(text)
        }
        return text
    }

    @Test func aGapIsNoticedAndTheWhispererSendsEverythingAgain() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let (_, _, whisperer, ada) = try await LiveHarness.oneJoined(stack)
            try await whisperer.side.type("one")
            try await whisperer.side.newline()
            try await whisperer.side.type("two")
            try await ada.record.waitFor { if case .text(let t) = $0 { t.live == "two" } else { false } }
            let asked = await whisperer.record.frames(.liveFromListener).count
            // A packet past the end of Ada's live text: she missed one, and asks for a re-read.
            try await whisperer.side.send(LiveTextPacket(offset: 12, data: "lost"))
            try await whisperer.side.type("two and three")
            try await waitUntil { await whisperer.record.frames(.liveFromListener).count > asked }
            try await ada.record.waitFor { if case .text(let t) = $0 { t.past == ["one"] && t.live == "two and three" && !t.rereading } else { false } }
        }
    }

    @Test func listenersAreToldWhenTheWhispererDropsAndRejoinWhenItReturns() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let (owner, conversation, first, ada) = try await LiveHarness.oneJoined(stack)
            try await first.side.type("hello")

            // Said so.
            try await first.side.drop()
            try await ada.record.waitFor { $0 == .whispererLeft(.dropping) }
            // Came back, then lost its socket.
            let second = try await LiveHarness.whisperer(owner, conversation, stack: stack, on: 1)
            try await second.record.waitFor { $0 == .arrived(listenerId: ada.id, known: true, name: "Ada") }
            try await ada.record.waitFor { $0 == .admitted }
            try await second.side.type("back again")
            try await ada.record.waitFor { if case .text(let t) = $0 { t.live == "back again" } else { false } }
            await second.connection.close()
            try await ada.record.waitFor { $0 == .whispererLeft(.leave) }
        }
    }

    /// Deleting the conversation while it is live lets everyone in it go at once: the
    /// listener is told and hears nothing more, and the Whisperer's packets are refused.
    @Test func deletingTheConversationEndsEveryPlaceInIt() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let (_, conversation, whisperer, ada) = try await LiveHarness.oneJoined(stack)
            try await whisperer.side.type("before")
            try await ada.record.waitFor { if case .text(let t) = $0 { t.live == "before" } else { false } }
            let heard = await ada.record.frames(.liveContent).count

            try await whisperer.connection.deleteLiveConversation(conversation.conversationId)
            try await ada.record.waitFor { $0 == .whispererLeft(.deleted) }
            try await whisperer.record.waitFor { $0 == .deleted }
            try await whisperer.side.type("after")
            try await waitUntil { await whisperer.record.frames(.error).contains { $0.payload(as: ErrorPayload.self)?.code == .notFound } }
            // Refused before any relay: what Ada received ends with the deletion.
            #expect(await ada.record.frames(.liveContent).count == heard)
            await expectRefused(.notFound, "taking the place again") { try await whisperer.side.start() }
        }
    }

    /// The owner's own socket is told `live_dropped` (`deleted`) before the answer to its
    /// `live_conversation_delete`, also with the gateway busy: 40 conversations, each
    /// deleted while two users on the same gateway exchange messages flat out. The frames
    /// are read off a plain socket, in the order they came.
    @Test func theOwnersSocketHearsItsPlaceGoBeforeTheDeletionIsAnswered() async throws {
        let rule = RateLimitRule(capacity: 1_000, period: .seconds(60))
        try await MessagingStack.start(routers: 0, gateway: { $0.limits[.liveConversationsPerIdentity] = rule }).running { stack in
            let owner = try await stack.offlineUser(on: 0)
            let bob = try await stack.user(on: 0), carol = try await stack.user(on: 0)
            try await stack.makePeers([bob, carol])
            let load = Task {
                while !Task.isCancelled {
                    async let one: Void = { _ = try? await bob.connection.send(bob.message("busy", to: carol)) }()
                    async let other: Void = { _ = try? await carol.connection.send(carol.message("busy", to: bob)) }()
                    _ = await (one, other)
                }
            }
            defer { load.cancel() }
            try await WebSocketTest.connect(stack.websocketURL(0)) { socket in
                for round in 0..<40 {
                    try await socket.send(LiveConversationCreate(sessionToken: owner.token, .init(name: "Round \(round)")), requestId: "create-\(round)")
                    let created = try #require(try await socket.answer(to: "create-\(round)").payload(as: LiveConversation.self))
                    let conversationId = created.conversationId
                    try await socket.send(LiveWhisperOffer(sessionToken: owner.token, .init(conversationId: conversationId, whispererName: "Sam")), requestId: "offer-\(round)")
                    #expect(try await socket.answer(to: "offer-\(round)").type == .liveAck)
                    try await socket.send(LiveConversationDelete(sessionToken: owner.token, .init(conversationId: conversationId)), requestId: "delete-\(round)")
                    var told = false
                    while true {
                        let frame = try await socket.receive(timeout: .seconds(10))
                        if frame.type == .liveDropped, frame.payload(as: LiveDropped.self) == LiveDropped(conversationId: conversationId, listenerId: nil, reason: .deleted) {
                            told = true
                        }
                        guard frame.requestId == "delete-\(round)" else { continue }
                        #expect(frame.type == .liveConversationDeleted)
                        break
                    }
                    #expect(told, "round \(round): live_conversation_deleted came before live_dropped")
                }
            }
        }
    }

    @Test func deviceCookiesAreCheckedAndSurviveARotationOfTheInternalToken() throws {
        let old = String(repeating: "a", count: 40), new = String(repeating: "b", count: 40)
        let before = LiveDevices(internalToken: old)
        let (id, cookie) = before.issue()
        #expect(before.device(fromCookie: cookie[...])?.id == id)
        #expect(before.device(fromCookieHeaders: ["theme=dark; \(LiveDevices.cookieName)=\(cookie); lang=en"])?.id == id)
        // Another device's ID under this MAC, a cut MAC, another key: no device.
        let other = UUID().uuidString.lowercased()
        let mac = try #require(cookie.split(separator: ".").last)
        #expect(before.device(fromCookie: "\(other).\(mac)"[...]) == nil)
        #expect(before.device(fromCookie: cookie.dropLast()) == nil)
        #expect(LiveDevices(internalToken: new).device(fromCookie: cookie[...]) == nil)
        // Rotating: the old cookie is still the device (not current), renewed under the new key.
        let during = LiveDevices(internalToken: new, previousToken: old)
        let seen = try #require(during.device(fromCookie: cookie[...]))
        #expect(seen.id == id && !seen.current)
        let renewed = during.issue(id).cookie
        #expect(LiveDevices(internalToken: new).device(fromCookie: renewed[...])?.id == id)
        #expect(LiveDevices(internalToken: new).device(fromCookie: renewed[...])?.current == true)
    }

    @Test func limits() async throws {
        try await MessagingStack.start(routers: 0, gateway: {
            $0.liveMaxListeners = 2
            $0.liveMaxSockets = 4
            $0.limits[.livePacketsPerWhisperer] = RateLimitRule(capacity: 5, period: .seconds(3_600))
            $0.limits[.liveOffersPerDevice] = RateLimitRule(capacity: 2, period: .seconds(3_600))
        }).running { stack in
            let owner = try await stack.user(on: 0)
            let conversation = try await owner.connection.createLiveConversation(name: "Limits")
            let whisperer = try await LiveHarness.whisperer(owner, conversation, stack: stack, on: 0)
            var listeners: [LiveHarness.Listener] = []
            for name in ["A", "B", "C"] {
                let listener = try await LiveHarness.listener(conversation, name: name, stack: stack, on: 1)
                try await whisperer.record.waitFor { $0 == .request(listenerId: listener.id, name: name) }
                listeners.append(listener)
            }
            // Listeners kept per conversation.
            try await whisperer.side.admit(listeners[0].id)
            try await whisperer.side.admit(listeners[1].id)
            await expectRefused(.forbidden, "a third listener kept") { try await whisperer.side.admit(listeners[2].id) }
            let secondId = listeners[1].id
            try await whisperer.record.waitFor { $0 == .joined(listenerId: secondId, name: "B") }
            // Devices the Whisperer never let in wait in at most four places (C, D, E, F);
            // the joined listeners (A, B) do not count against them, nor they against A and B.
            for name in ["D", "E", "F"] { _ = try await LiveHarness.listener(conversation, name: name, stack: stack, on: 0) }
            await expectRefused(.forbidden, "a fifth device waiting") { _ = try await LiveHarness.listener(conversation, name: "G", stack: stack, on: 0) }
            // Listen offers per device (2), whatever the conversation: A's socket offers again.
            let offerAgain = LiveListenOffer(.init(conversationId: conversation.conversationId, publicKey: LiveHarness.publicKey()))
            _ = try await listeners[0].connection.request(offerAgain)
            await expectRefused(.rateLimited, "a third offer from one device") { _ = try await listeners[0].connection.request(offerAgain) }
            // Packet size: checked before anything else.
            await expectRefused(.invalidPayload, "an oversized packet") {
                _ = try await whisperer.connection.request(LivePacket(
                    sessionToken: owner.token, .init(conversationId: conversation.conversationId, keyId: 1,
                    packet: Data(count: Limits.MAX_LIVE_PACKET_BYTES + 1).base64EncodedString())
                ))
            }
            // Packets per Whisperer.
            for index in 1...5 { try await whisperer.side.type(String(repeating: "x", count: index)) }
            try await whisperer.side.type("refused")
            try await waitUntil { await whisperer.record.frames(.error).contains { $0.payload(as: ErrorPayload.self)?.code == .rateLimited } }
            // A socket without a listener device cannot listen.
            let bare = WhisperConnection(url: stack.websocketURL(0), logger: TestServers.logger)
            try await bare.connect()
            await expectRefused(.notRegistered, "listen offer without a device") {
                _ = try await bare.request(LiveListenOffer(.init(conversationId: conversation.conversationId, publicKey: LiveHarness.publicKey())))
            }
            // A forged cookie is no device.
            let forged = WhisperConnection(
                url: stack.websocketURL(0), listenerDevice: ListenerDevice(deviceId: UUID().uuidString.lowercased(), cookie: "\(UUID().uuidString.lowercased()).AAAA"),
                logger: TestServers.logger
            )
            try await forged.connect()
            await expectRefused(.notRegistered, "listen offer with a forged cookie") {
                _ = try await forged.request(LiveListenOffer(.init(conversationId: conversation.conversationId, publicKey: LiveHarness.publicKey())))
            }
            // The conversation deleted under the Whisperer: answered as gone, not as a failure.
            try await whisperer.connection.deleteLiveConversation(conversation.conversationId)
            try await whisperer.record.waitFor { $0 == .deleted }
            await expectRefused(.notFound, "authorize in a deleted conversation") {
                _ = try await whisperer.connection.request(LiveAuthorize(
                    sessionToken: owner.token, .init(conversationId: conversation.conversationId, listenerId: listeners[0].id, listenerName: "A",
                    keyId: 1, sealedKey: Data(count: Limits.LIVE_SEALED_KEY_BYTES).base64EncodedString())
                ))
            }
            await expectRefused(.notFound, "a listen offer to a deleted conversation") {
                _ = try await LiveHarness.listener(conversation, name: "G", stack: stack, on: 0)
            }
        }
    }
}

/// Drives SDK sides of live text for the tests: each on a socket of its own, fed every
/// frame of it, with what it returned and what arrived recorded.
enum LiveHarness {
    struct Whisperer {
        let side: LiveWhisperer
        let connection: WhisperConnection
        let record: LiveRecord<LiveWhisperer.Event>
    }

    struct Listener {
        let side: LiveListener
        let connection: WhisperConnection
        let record: LiveRecord<LiveListener.Event>
        let id: String
        let name: String
    }

    static func whisperer(_ user: TestUser, _ conversation: LiveConversation, stack: MessagingStack, on gateway: Int) async throws -> Whisperer {
        let connection = WhisperConnection(url: stack.websocketURL(gateway), logger: TestServers.logger)
        try await connection.connect()
        await connection.resume(whisperId: user.whisperId, sessionToken: user.token)
        let side = LiveWhisperer(connection: connection, conversationId: conversation.conversationId, name: "Sam")
        let record = LiveRecord<LiveWhisperer.Event>(connection) { try await side.handle($0) }
        try await side.start()
        return Whisperer(side: side, connection: connection, record: record)
    }

    static func listener(
        device: ListenerDevice? = nil, _ conversation: LiveConversation, name: String, stack: MessagingStack, on gateway: Int
    ) async throws -> Listener {
        let given = device
        let device = if let given { given } else { try await ListenerDevice.issue(websocketURL: stack.websocketURL(gateway)) }
        let connection = WhisperConnection(url: stack.websocketURL(gateway), listenerDevice: device, logger: TestServers.logger)
        try await connection.connect()
        let side = LiveListener(connection: connection, conversationId: conversation.conversationId, name: name)
        let record = LiveRecord<LiveListener.Event>(connection) { try await side.handle($0) }
        let id = try await side.start()
        #expect(id == device.deviceId)
        return Listener(side: side, connection: connection, record: record, id: id, name: name)
    }

    /// A conversation, its Whisperer on gateway 0 and one listener (Ada) on gateway 1, let in and joined.
    static func oneJoined(_ stack: MessagingStack) async throws -> (TestUser, LiveConversation, Whisperer, Listener) {
        let owner = try await stack.user(on: 0)
        let conversation = try await owner.connection.createLiveConversation(name: "One listener")
        let whisperer = try await whisperer(owner, conversation, stack: stack, on: 0)
        let ada = try await listener(conversation, name: "Ada", stack: stack, on: 1)
        try await whisperer.record.waitFor { $0 == .request(listenerId: ada.id, name: "Ada") }
        try await whisperer.side.admit(ada.id)
        try await whisperer.record.waitFor { $0 == .joined(listenerId: ada.id, name: "Ada") }
        return (owner, conversation, whisperer, ada)
    }

    /// The names of the listeners the conversation keeps (Postgres).
    static func kept(_ conversation: LiveConversation, stack: MessagingStack) async throws -> [String] {
        try await stack.withPostgres { postgres in
            var names: [String] = []
            let rows = try await postgres.query("SELECT name FROM live_listeners WHERE conversation_id = \(conversation.conversationId)", logger: TestServers.logger)
            for try await name in rows.decode(String.self) { names.append(name) }
            return names
        }
    }

    static func publicKey() -> String {
        P256.KeyAgreement.PrivateKey().publicKey.x963Representation.base64EncodedString()
    }
}

/// What one side returned and every frame its socket received.
actor LiveRecord<Event: Sendable & Equatable> {
    private(set) var events: [Event] = []
    private var received: [ServerFrame] = []
    private(set) var failures: [String] = []

    init(_ connection: WhisperConnection, _ handle: @escaping @Sendable (ServerFrame) async throws -> Event?) {
        let frames = connection.events
        Task {
            for await frame in frames {
                await self.arrived(frame)
                do {
                    if let event = try await handle(frame) { await self.add(event) }
                } catch {
                    await self.failed("\(error)")
                }
            }
        }
    }

    private func arrived(_ frame: ServerFrame) { received.append(frame) }
    private func add(_ event: Event) { events.append(event) }
    private func failed(_ failure: String) { failures.append(failure) }

    func frames(_ type: ServerFrameType) -> [ServerFrame] { received.filter { $0.type == type } }
    func count(_ matching: (Event) -> Bool) -> Int { events.filter(matching).count }

    @discardableResult
    func waitFor(timeout: Duration = .seconds(10), _ matching: @Sendable (Event) -> Bool) async throws -> Event {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let found = events.first(where: matching) { return found }
            try await Task.sleep(for: .milliseconds(10))
        }
        throw TestSetupError("no such event; had \(events), failures \(failures)")
    }
}

/// A flow of Tests/Console against the listener page in headless Chromium, run while the
/// test answers it: the process, and all it printed once it ends.
struct ListenPageFlow {
    let process = Process()
    let directory: String
    private let reading: Task<String, Never>

    /// Starts `script` for the page of `conversationId` at `base` (http://host:port), its
    /// screenshots in the artifacts' `name` folder.
    init(_ script: String, base: String, conversationId: String, artifacts name: String, extra: [String] = []) throws {
        directory = "\(ConsoleTests.artifacts)/\(name)"
        try? FileManager.default.removeItem(atPath: directory)
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [
            MotoProcess.python, TestServers.repoRoot.appendingPathComponent("Tests/Console/\(script)").path,
            "--base", base, "--conversation", conversationId, "--artifacts", directory, "--chromium", ConsoleTests.chromium,
        ] + extra
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        reading = Task { String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
    }

    /// Waits for the flow to end: its exit status, all it printed, and the steps its last
    /// line reports.
    func finish(timeout: Duration = .seconds(90)) async throws -> (status: Int32, output: String, steps: [String]?) {
        do {
            try await waitUntil(timeout: timeout) { !process.isRunning }
        } catch {
            process.terminate()
            throw error
        }
        let text = await reading.value
        let summary = text.split(separator: "\n").last.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) } as? [String: Any]
        return (process.terminationStatus, text, summary?["steps"] as? [String])
    }
}

/// The listener page in headless Chromium (Tests/Console/listen_flow.py), answered by an
/// SDK Whisperer on the same stack.
@Suite struct LiveBrowserTests {
    /// Two browser contexts (two devices) share one listener profile through a "use on
    /// another device" link (Tests/Console/listen_profile_flow.py): let in once, both read;
    /// let go, neither does; a name given on one shows on the other.
    @Test func twoBrowsersShareAProfileAndAreLetInAndGoTogether() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let owner = try await stack.user(on: 0)
            let conversation = try await owner.connection.createLiveConversation(name: "Kitchen table")
            let whisperer = try await LiveHarness.whisperer(owner, conversation, stack: stack, on: 0)

            let flow = try ListenPageFlow(
                "listen_profile_flow.py", base: "http://127.0.0.1:\(stack.gateways[1].port)", conversationId: conversation.conversationId,
                artifacts: "listen-profile"
            )
            defer { if flow.process.isRunning { flow.process.terminate() } }

            // The phone asks as Grandma: let in once. The laptop, of the same profile, is
            // known and let in by the Whisperer's client at once.
            let asked = try await whisperer.record.waitFor(timeout: .seconds(60)) { if case .request(_, "Grandma") = $0 { true } else { false } }
            let phoneRequest: String? = if case .request(let id, _) = asked { id } else { nil }
            let phone = try #require(phoneRequest)
            try await whisperer.side.admit(phone)
            let laptopArrived = try await whisperer.record.waitFor(timeout: .seconds(60)) {
                if case .arrived(let id, true, "Grandma") = $0 { id != phone } else { false }
            }
            let laptopId: String? = if case .arrived(let id, _, _) = laptopArrived { id } else { nil }
            let laptop = try #require(laptopId)
            try await whisperer.record.waitFor(timeout: .seconds(30)) { $0 == .joined(listenerId: laptop, name: "Grandma") }
            try await whisperer.side.type("for both of you")
            try await waitUntil(timeout: .seconds(60)) { FileManager.default.fileExists(atPath: "\(flow.directory)/both-reading") }
            // Let go through the phone: both devices are out.
            try await whisperer.side.refuse(phone)

            let ended = try await flow.finish()
            #expect(ended.status == 0, "listen_profile_flow.py: \(ended.output)")
            #expect(ended.steps == ["phone-shares", "both-reading", "let-go", "renamed"])
            #expect(try await LiveHarness.kept(conversation, stack: stack).isEmpty)
        }
    }

    @Test func aBrowserJoinsReadsARevisionAndAnotherIsRefused() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let owner = try await stack.user(on: 0)
            let conversation = try await owner.connection.createLiveConversation(name: "Kitchen table")
            let whisperer = try await LiveHarness.whisperer(owner, conversation, stack: stack, on: 0)

            let flow = try ListenPageFlow(
                "listen_flow.py", base: "http://127.0.0.1:\(stack.gateways[1].port)", conversationId: conversation.conversationId, artifacts: "listen"
            )
            defer { if flow.process.isRunning { flow.process.terminate() } }

            // The page asks as Ada: let her in, then type.
            let ada = try await whisperer.record.waitFor(timeout: .seconds(60)) { if case .request(_, "Ada") = $0 { true } else { false } }
            let adaRequest: String? = if case .request(let id, _) = ada { id } else { nil }
            let adaId = try #require(adaRequest)
            try await whisperer.side.admit(adaId)
            try await whisperer.record.waitFor { $0 == .joined(listenerId: adaId, name: "Ada") }
            for text in ["Good", "Good evening"] { try await whisperer.side.type(text) }
            try await whisperer.side.newline()
            for text in ["Hel", "Hello", "Hello there"] { try await whisperer.side.type(text) }
            // Once the page showed it, a revision: "there" becomes "world".
            try await waitUntil(timeout: .seconds(60)) { FileManager.default.fileExists(atPath: "\(flow.directory)/seen-first") }
            try await whisperer.side.type("Hello w")
            try await whisperer.side.type("Hello world")
            // A second browser asks as Eve: refused.
            let eve = try await whisperer.record.waitFor(timeout: .seconds(60)) { if case .request(_, "Eve") = $0 { true } else { false } }
            let eveRequest: String? = if case .request(let id, _) = eve { id } else { nil }
            let eveId = try #require(eveRequest)
            try await whisperer.side.refuse(eveId)

            let ended = try await flow.finish()
            #expect(ended.status == 0, "listen_flow.py: \(ended.output)")
            #expect(ended.steps == ["join", "reading", "revised", "refused"])
            // The page's listener was kept under the name it typed; the refused one was not.
            let kept = try await LiveHarness.kept(conversation, stack: stack)
            #expect(kept == ["Ada"])
        }
    }
}
