import Foundation
@testable import GatewayService
import Testing
import WhisperClient
import WhisperShared

/// Listener profiles (docs/protocol.md section 13, "Listener profiles"): devices that
/// join one profile through a code are one listener to the Whisperer, let in and let go
/// together.
@Suite struct LiveProfileTests {
    /// A socket of `device` on `gateway`, for its profile frames.
    static func socket(_ device: ListenerDevice, _ stack: MessagingStack, on gateway: Int) async throws -> WhisperConnection {
        let connection = WhisperConnection(url: stack.websocketURL(gateway), listenerDevice: device, logger: TestServers.logger)
        try await connection.connect()
        return connection
    }

    static func answer<Answer: ServerPayload>(_ connection: WhisperConnection, _ payload: some ClientPayload) async throws -> Answer {
        try #require(try await connection.request(payload).payload(as: Answer.self))
    }

    /// The next unasked frame of `type` on the socket.
    static func next(_ type: ServerFrameType, on connection: WhisperConnection) async throws -> ServerFrame {
        try await withTimeout("a \(type.rawValue) frame") {
            for await frame in connection.events where frame.type == type { return frame }
            throw TestSetupError("the socket closed")
        }
    }

    @Test func twoDevicesOfOneProfileAreLetInOnceAndLetGoTogether() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let owner = try await stack.user(on: 0)
            let conversation = try await owner.connection.createLiveConversation(name: "Kitchen table")
            let whisperer = try await LiveHarness.whisperer(owner, conversation, stack: stack, on: 0)
            let phone = try await ListenerDevice.issue(websocketURL: stack.websocketURL(1))
            let laptop = try await ListenerDevice.issue(websocketURL: stack.websocketURL(0))

            // Each device starts alone, in a profile of its own.
            let phoneSocket = try await Self.socket(phone, stack, on: 1), laptopSocket = try await Self.socket(laptop, stack, on: 0)
            defer { Task { await phoneSocket.close(); await laptopSocket.close() } }
            let alone: LiveProfile = try await Self.answer(phoneSocket, LiveProfileGet(.init()))
            #expect(alone == LiveProfile(profileId: phone.deviceId, name: nil, devices: 1))

            // The phone names its profile and makes a code; the laptop joins with it, and
            // the code is used up.
            _ = try await Self.answer(phoneSocket, LiveProfileRename(.init(name: "Grandma"))) as LiveProfile
            let code: LiveProfileCode = try await Self.answer(phoneSocket, LiveProfileShare(.init()))
            #expect(PTTJoinCode.isValid(code.code) && code.expiresAt > Clock.millisecondsNow())
            let joined: LiveProfile = try await Self.answer(laptopSocket, LiveProfileJoin(.init(code: code.code)))
            #expect(joined == LiveProfile(profileId: phone.deviceId, name: "Grandma", devices: 2))
            await expectRefused(.notFound, "a code used twice") { _ = try await laptopSocket.request(LiveProfileJoin(.init(code: code.code))) }
            // The phone heard of its second device; a name given on the laptop reaches the
            // phone at once, on its other gateway.
            #expect(try await Self.next(.liveProfile, on: phoneSocket).payload(as: LiveProfile.self)?.devices == 2)
            #expect(try await laptopSocket.renameLiveProfile("Grandma Ada").name == "Grandma Ada")
            #expect(try await Self.next(.liveProfile, on: phoneSocket).payload(as: LiveProfile.self)?.name == "Grandma Ada")

            // Let in once, on the phone: the laptop is known under the profile's name and
            // let in at once; both read the text.
            let onPhone = try await LiveHarness.listener(device: phone, conversation, name: "Ada", stack: stack, on: 1)
            try await whisperer.record.waitFor { $0 == .request(listenerId: phone.deviceId, name: "Ada") }
            try await whisperer.side.admit(phone.deviceId)
            try await onPhone.record.waitFor { $0 == .admitted }
            let onLaptop = try await LiveHarness.listener(device: laptop, conversation, name: "Ada", stack: stack, on: 0)
            try await whisperer.record.waitFor { $0 == .arrived(listenerId: laptop.deviceId, known: true, name: "Grandma Ada") }
            try await onLaptop.record.waitFor { $0 == .admitted }
            #expect(await whisperer.record.frames(.liveListenerOffered).compactMap { $0.payload(as: LiveListenerOffered.self)?.profileId }
                .allSatisfy { $0 == phone.deviceId })
            try await whisperer.side.type("both of you")
            for device in [onPhone, onLaptop] {
                try await device.record.waitFor { if case .text(let t) = $0 { t.live == "both of you" } else { false } }
            }

            // Either device lists the conversation, live while the Whisperer is in it;
            // another conversation of the same Whisperer that never let it in is not listed.
            _ = try await whisperer.connection.createLiveConversation(name: "Clinic")
            for socket in [phoneSocket, laptopSocket] {
                let listed: LiveProfileConversations = try await Self.answer(socket, LiveProfileConversationsList(.init()))
                #expect(listed.conversations.map(\.conversationId) == [conversation.conversationId])
                #expect(listed.conversations.first.map { ($0.name, $0.whispererName, $0.live) } ?? ("", nil, false) == ("Kitchen table", "Sam", true))
            }

            // Let go through one device: both are out, and neither reads anything more.
            try await whisperer.side.refuse(phone.deviceId)
            try await onPhone.record.waitFor { $0 == .removed }
            try await onLaptop.record.waitFor { $0 == .removed }
            let heard = (await onPhone.record.frames(.liveContent).count, await onLaptop.record.frames(.liveContent).count)
            try await whisperer.side.type("after")
            try await waitUntil { try await LiveHarness.kept(conversation, stack: stack).isEmpty }
            // The laptop's place is gone too, and it cannot get back in by itself.
            await expectRefused(.notFound, "the laptop joining again (no place)") {
                _ = try await onLaptop.connection.request(LiveJoining(.init(conversationId: conversation.conversationId)))
            }
            _ = try await onLaptop.connection.request(LiveListenOffer(.init(conversationId: conversation.conversationId, publicKey: LiveHarness.publicKey())))
            await expectRefused(.forbidden, "the laptop joining after its profile was let go") {
                _ = try await onLaptop.connection.request(LiveJoining(.init(conversationId: conversation.conversationId)))
            }
            #expect(await onPhone.record.frames(.liveContent).count == heard.0)
            #expect(await onLaptop.record.frames(.liveContent).count == heard.1)
            // Let go, the conversation is no longer listed.
            #expect((try await Self.answer(laptopSocket, LiveProfileConversationsList(.init())) as LiveProfileConversations).conversations.isEmpty)

            // The laptop leaves for a profile of its own; deleting the phone's profile
            // gives the phone a new one too, with nothing of the old.
            let left = try await laptopSocket.leaveLiveProfile()
            #expect(left.profileId != phone.deviceId && left.devices == 1 && left.name == nil)
            #expect(try await Self.next(.liveProfile, on: phoneSocket).payload(as: LiveProfile.self)?.devices == 1)
            let fresh: LiveProfile = try await Self.answer(phoneSocket, LiveProfileDelete(.init()))
            #expect(fresh.profileId != phone.deviceId && fresh.devices == 1 && fresh.name == nil)
        }
    }

    /// Codes can be guessed, so wrong ones are bounded per device (here 3 an hour): past
    /// the bound even a right code is refused. A profile keeps at most 3 codes waiting,
    /// and takes at most 10 devices.
    @Test func guessedCodesCodesWaitingAndDevicesAreBounded() async throws {
        try await MessagingStack.start(routers: 0, gateway: {
            $0.limits[.liveProfileCodeMissesPerDevice] = RateLimitRule(capacity: 3, period: .seconds(3_600))
            $0.limits[.liveDevicesPerAddress] = RateLimitRule(capacity: 100, period: .seconds(3_600))
        }).running { stack in
            let owner = try await Self.socket(try await ListenerDevice.issue(websocketURL: stack.websocketURL(0)), stack, on: 0)
            defer { Task { await owner.close() } }
            var codes: [String] = []
            for _ in 0..<LiveProfiles.maxCodes {
                codes.append((try await Self.answer(owner, LiveProfileShare(.init())) as LiveProfileCode).code)
            }
            await expectRefused(.forbidden, "a fourth code waiting") { _ = try await owner.request(LiveProfileShare(.init())) }

            let guesser = try await Self.socket(try await ListenerDevice.issue(websocketURL: stack.websocketURL(1)), stack, on: 1)
            defer { Task { await guesser.close() } }
            var wrong = PTTJoinCode.make()
            while codes.contains(wrong) { wrong = PTTJoinCode.make() }
            for _ in 0..<3 {
                await expectRefused(.notFound, "a wrong code") { _ = try await guesser.request(LiveProfileJoin(.init(code: wrong))) }
            }
            await expectRefused(.rateLimited, "a right code past the bound of misses") {
                _ = try await guesser.request(LiveProfileJoin(.init(code: codes[0])))
            }

            // Up to ten devices, one code each (codes used up make room for more).
            var devices = 1
            while devices < LiveProfiles.maxDevices {
                let code = codes.isEmpty ? (try await Self.answer(owner, LiveProfileShare(.init())) as LiveProfileCode).code : codes.removeFirst()
                let device = try await Self.socket(try await ListenerDevice.issue(websocketURL: stack.websocketURL(0)), stack, on: 0)
                let profile: LiveProfile = try await Self.answer(device, LiveProfileJoin(.init(code: code)))
                await device.close()
                devices += 1
                #expect(profile.devices == devices)
            }
            let code = codes.isEmpty ? (try await Self.answer(owner, LiveProfileShare(.init())) as LiveProfileCode).code : codes.removeFirst()
            let eleventh = try await Self.socket(try await ListenerDevice.issue(websocketURL: stack.websocketURL(0)), stack, on: 0)
            defer { Task { await eleventh.close() } }
            await expectRefused(.forbidden, "an eleventh device") { _ = try await eleventh.request(LiveProfileJoin(.init(code: code))) }
            #expect((try await Self.answer(owner, LiveProfileGet(.init())) as LiveProfile).devices == LiveProfiles.maxDevices)
        }
    }
}
