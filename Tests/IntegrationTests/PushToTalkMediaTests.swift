import Foundation
import Testing
import WhisperClient
import WhisperShared

/// Push-to-talk audio between real WebRTC stacks (aiortc, one process per member:
/// `MediaEngine`), forced through a real coturn relay with credentials from turn-cred.
/// The members here hold their identities and do everything a client does around the
/// media engine: signaling through the gateway (`ptt_signal`, signed and sealed), the
/// floor, and checking each grant's signature before playing its holder.
@Suite struct PushToTalkMediaTests {
    static let secret = "ptt-media-turn-secret-0123456789"

    @Test func theHoldersToneIsHeardThroughTheRelayThenTheNextHoldersAfterANewGrant() async throws {
        let coturn = try CoturnProcess(secrets: [Self.secret])
        let internalPort = try TestServers.freePort()
        try await MessagingStack.start(routers: 0, gateway: { $0.turnCredURL = "http://127.0.0.1:\(internalPort)" }).running { stack in
            let (turnCred, _) = try await TurnTests.startTurnCred(
                on: stack, secrets: [Self.secret], internalPort: internalPort, urls: ["turn:127.0.0.1:\(coturn.port)?transport=udp"]
            )
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1), carol = try await stack.user(on: 0)
            let floorKeys = try await WhisperConnection.fetchFloorKeys(websocketURL: stack.websocketURL(1))
            try await Self.eachHolderIsHeardInTurn(alice, bob, carol, floorKeys: floorKeys)
            try await turnCred.stop()
        }
    }

    /// The whole flow for three registered members (here, and through the deployed
    /// topology's edge: TopologyTests): a channel, a mesh of relayed WebRTC connections
    /// signaled through the gateways, and two holders in turn, each heard by the others.
    static func eachHolderIsHeardInTurn(_ alice: TestUser, _ bob: TestUser, _ carol: TestUser, floorKeys: PTTFloorKeys) async throws {
        let members = [alice, bob, carol]
        let channel = try await alice.connection.createChannel(name: "Ridge")
        for member in [bob, carol] { _ = try await member.connection.joinChannel(code: channel.joinCode) }

        // Each member's engine relays only, through the TURN server turn-cred names, with
        // the member's own credentials.
        var engines: [String: MediaEngine] = [:]
        for (name, member) in zip(["alice", "bob", "carol"], members) {
            let credentials = try await member.connection.turnCredentials()
            let engine = try MediaEngine(name: name)
            try engine.send(.init(op: "ice", urls: credentials.urls, username: credentials.username, credential: credentials.credential))
            _ = try await engine.next("ready")
            engines[member.whisperId] = engine
        }
        func engine(_ member: TestUser) throws -> MediaEngine { try #require(engines[member.whisperId]) }

        // A full mesh: in each pair the member whose ID sorts first offers (protocol.md
        // section 14), and the offer and answer are carried through the gateway.
        for (one, other) in [(alice, bob), (alice, carol), (bob, carol)] {
            let (offerer, answerer) = one.whisperId < other.whisperId ? (one, other) : (other, one)
            try engine(offerer).send(.init(op: "offer", peer: answerer.whisperId))
            let offer = try #require(try await engine(offerer).next("offer", peer: answerer.whisperId).sdp)
            #expect(candidateTypes(offer) == ["relay"], "the offer names other than relay candidates")
            let carriedOffer = try await carry(.offer, offer, in: channel.channelId, from: offerer, to: answerer)
            #expect(carriedOffer == offer)
            try engine(answerer).send(.init(op: "answer", peer: offerer.whisperId, sdp: carriedOffer))
            let answer = try #require(try await engine(answerer).next("answer", peer: offerer.whisperId).sdp)
            #expect(candidateTypes(answer) == ["relay"], "the answer names other than relay candidates")
            let carriedAnswer = try await carry(.answer, answer, in: channel.channelId, from: answerer, to: offerer)
            try engine(offerer).send(.init(op: "accept", peer: answerer.whisperId, sdp: carriedAnswer))
        }
        // Six ends connected, each over a pair of relay candidates, sending Opus.
        for member in members {
            for peer in members where peer.whisperId != member.whisperId {
                let state = try await engine(member).next("state", peer: peer.whisperId) { $0.state == "connected" || $0.state == "failed" }
                try #require(state.state == "connected")
                try engine(member).send(.init(op: "route", peer: peer.whisperId))
                let route = try await engine(member).next("route", peer: peer.whisperId)
                #expect(route.offered == ["relay"])
                #expect(route.chosen == ["local": "relay", "remote": "relay"])
                #expect(route.codecs == ["audio/opus"])
            }
        }

        // Alice takes the floor and says 440 Hz. Carol, refused the floor, transmits
        // 1500 Hz anyway: it reaches the others, but compliant receivers do not play it.
        #expect(try await alice.connection.requestTalk(channel.channelId).outcome == .granted)
        let refused = try await carol.connection.requestTalk(channel.channelId)
        #expect(refused.outcome == .refused && refused.holder == alice.whisperId)
        for listener in [bob, carol] {
            try await playWhoHoldsTheFloor(alice, channel: channel.channelId, listener: listener, engine: engine(listener), floorKeys: floorKeys)
        }
        try engine(alice).send(.init(op: "transmit", frequency: 440))
        try engine(carol).send(.init(op: "transmit", frequency: 1_500))
        let bobHears = try await engine(bob).listenUntilPlayed()
        #expect(bobHears.played?.isTone(440) == true, "Bob played \(String(describing: bobHears.played))")
        #expect(bobHears.peers?[carol.whisperId]?.isTone(1_500) == true, "Carol's tone did not reach Bob: \(String(describing: bobHears.peers))")
        let carolHears = try await engine(carol).listenUntilPlayed()
        #expect(carolHears.played?.isTone(440) == true, "Carol played \(String(describing: carolHears.played))")

        // Alice lets go; nobody is played while the floor is free. Bob is granted it and
        // says 1000 Hz: that is what Alice and Carol hear now.
        try engine(alice).send(.init(op: "transmit"))
        try engine(carol).send(.init(op: "transmit"))
        #expect(try await alice.connection.releaseTalk(channel.channelId).outcome == .released)
        for listener in [alice, carol] {
            try await waitUntil { await PushToTalkTests.floors(listener).last.map { $0.outcome == .released && $0.holder == nil } ?? false }
            try engine(listener).send(.init(op: "play"))
        }
        #expect(try await engine(carol).listen().played?.level == 0)
        #expect(try await bob.connection.requestTalk(channel.channelId).outcome == .granted)
        for listener in [alice, carol] {
            try await playWhoHoldsTheFloor(bob, channel: channel.channelId, listener: listener, engine: engine(listener), floorKeys: floorKeys)
        }
        try engine(bob).send(.init(op: "transmit", frequency: 1_000))
        for listener in [alice, carol] {
            let heard = try await engine(listener).listenUntilPlayed()
            #expect(heard.played?.isTone(1_000) == true, "\(listener.whisperId) played \(String(describing: heard.played))")
        }

        for engine in engines.values { try await engine.stop() }
        try await alice.connection.deleteChannel(channel.channelId)
    }

    /// The types of the ICE candidates an SDP names.
    static func candidateTypes(_ sdp: String) -> Set<String> {
        Set(sdp.split(whereSeparator: \.isNewline).compactMap { line -> String? in
            guard line.hasPrefix("a=candidate:") else { return nil }
            let fields = line.split(separator: " ")
            guard let typ = fields.firstIndex(of: "typ"), typ + 1 < fields.count else { return nil }
            return String(fields[typ + 1])
        })
    }

    /// Sends an SDP as a signed, sealed `ptt_signal` and returns it as the recipient
    /// opens it (signature checked).
    static func carry(_ kind: PTTSignalFields.Kind, _ sdp: String, in channelId: String, from sender: TestUser, to recipient: TestUser) async throws -> String {
        let signal = PTTSignaling.make(kind, Array(sdp.utf8), channelId: channelId, from: (sender.whisperId, sender.keys), to: recipient.peerKeys, sessionToken: sender.token)
        try await sender.connection.sendOnly(signal)
        var received: PTTSignalReceived?
        try await waitUntil {
            received = await recipient.events.all(.pttSignalReceived).compactMap { $0.payload(as: PTTSignalReceived.self) }
                .first { $0.signalId == signal.signalId }
            return received != nil
        }
        let opened = try PTTSignaling.open(try #require(received), by: (recipient.whisperId, recipient.keys), peer: sender.peerKeys)
        return String(decoding: opened, as: UTF8.self)
    }

    /// What a client does on `ptt_floor`: once told `holder` was granted the floor, it
    /// checks the grant's signature and window, and only then plays the holder's audio.
    static func playWhoHoldsTheFloor(_ holder: TestUser, channel: String, listener: TestUser, engine: MediaEngine, floorKeys: PTTFloorKeys) async throws {
        var grant: PTTFloor?
        try await waitUntil {
            grant = await PushToTalkTests.floors(listener).last { $0.channelId == channel && $0.holder == holder.whisperId }
            return grant != nil
        }
        let checked = try #require(grant)
        try #require(checked.isValidGrant(floorKeys: floorKeys, at: Clock.millisecondsNow()))
        try engine.send(.init(op: "play", holder: holder.whisperId))
    }
}
