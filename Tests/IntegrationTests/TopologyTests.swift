import AsyncHTTPClient
import Foundation
import NIOHTTP1
import Testing
import WhisperClient
import WhisperShared

/// The flows of a deployment, through its edge only: run by scripts/topology-test against
/// `scripts/up --topology` (the edge nginx in front of two instances of every service),
/// which sets `WHISPER_TOPOLOGY_EDGE` (the edge's base URL), `WHISPER_TOPOLOGY_ADMIN`
/// (an admin instance: operators reach it directly, never through the edge) and
/// `WHISPER_TOPOLOGY_ADMIN_TOKEN`. Skipped when they are not set.
private let topologyEdge = ProcessInfo.processInfo.environment["WHISPER_TOPOLOGY_EDGE"]

@Suite(.serialized, .enabled(if: topologyEdge != nil)) struct TopologyTests {
    static let edge = topologyEdge
    static let admin = ProcessInfo.processInfo.environment["WHISPER_TOPOLOGY_ADMIN"] ?? ""
    static let adminToken = ProcessInfo.processInfo.environment["WHISPER_TOPOLOGY_ADMIN_TOKEN"] ?? ""
    /// The routers' own ports (their metrics), which clients never reach.
    static let routers = (ProcessInfo.processInfo.environment["WHISPER_TOPOLOGY_ROUTERS"] ?? "").split(separator: " ").map(String.init)
    /// The third-party auditor's public key (`whisper-audit --serve` beside the stack):
    /// key lookups here require its signature (`DirectoryView(auditorKeys:)`).
    static let auditorKey = ProcessInfo.processInfo.environment["WHISPER_TOPOLOGY_AUDITOR_KEY"].flatMap { Data(base64Encoded: $0) }.map { [UInt8]($0) }

    var edge: String { Self.edge ?? "" }
    var endpoints: WhisperEndpoints {
        WhisperEndpoints(websocket: edge.replacingOccurrences(of: "http://", with: "ws://") + "/ws", auth: edge, attachments: edge, turn: edge)
    }

    /// `step` again while it fails `notAudited` (the auditor has not signed a head this
    /// recent yet), until `until`.
    static func retrying<T>(until: Duration, _ step: () async throws -> T) async throws -> T {
        let deadline = ContinuousClock.now + until
        while true {
            do {
                return try await step()
            } catch KeyTransparencyError.notAudited where ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(200))
            }
        }
    }

    func user() async throws -> TestUser {
        let keys = try WhisperKeys(mnemonic: BIP39.generateMnemonic())
        let connection = WhisperConnection(url: endpoints.websocket, logger: TestServers.logger)
        try await connection.connect()
        let ack = try await connection.register(keys: keys, deviceId: UUID().uuidString.lowercased(), platform: .ios)
        return TestUser(whisperId: ack.whisperId, keys: keys, token: ack.sessionToken, connection: connection, events: EventLog(connection))
    }

    /// docs/sdk.md's minimal app, as an app developer would first point it at a server.
    @Test func theExampleAppThroughTheEdge() async throws {
        try await ExampleAppTests.runs(websocket: endpoints.websocket, auth: edge)
    }

    @Test func messagingGroupsCallsAttachmentsAndAdminThroughTheEdge() async throws {
        let alice = try await user()
        let bob = try await user()
        // Messages both ways (which also makes them direct peers), and a receipt.
        let (sent, received) = try await alice.sendAndWaitForArrival("through the edge", to: bob)
        try await bob.connection.acknowledge(received)
        #expect(try await alice.events(.messageDelivered).first?.payload(as: MessageDelivered.self)?.messageId == sent.messageId)
        _ = try await bob.sendAndWaitForArrival("and back", to: alice)

        // A group, and a message to it.
        let group = try await alice.connection.createGroup(title: "Edge", memberIds: [bob.whisperId])
        let copies = alice.groupCopies("to the group", groupId: group.groupId, to: [bob])
        let outcomes = await alice.connection.sendGroup(copies)
        #expect(outcomes.values.allSatisfy { (try? $0.get()) != nil })
        try await waitUntil {
            await bob.events.all(.messageReceived).contains { $0.payload(as: MessageReceived.self)?.groupId == group.groupId }
        }

        // A call: signaling through the gateways, TURN credentials from turn-cred (over the
        // socket, through the internal balancer, and over HTTP through the edge).
        try await CallTests.ringAnswerAndHangUp(from: alice, to: bob)
        #expect(!(try await alice.connection.turnCredentials().urls.isEmpty))
        let auditorKey = try #require(Self.auditorKey, "WHISPER_TOPOLOGY_AUDITOR_KEY names the auditor beside the stack")
        let api = WhisperAPI(endpoints: endpoints, directory: DirectoryView(auditorKeys: [auditorKey]))
        #expect(!(try await api.turnCredentials(sessionToken: alice.token).urls.isEmpty))

        // Keys, proven by the directory and vouched for by the auditor beside the stack
        // (which signs within a few seconds of each epoch), and an attachment: presigned
        // through the edge, stored in the S3 store.
        let lookup = try await Self.retrying(until: .seconds(30)) { try await api.keys(of: bob.whisperId, sessionToken: alice.token) }
        #expect(lookup.keys.whisperId == bob.whisperId)
        #expect(await api.directory.audited != nil)
        let sealed = AttachmentCrypto.seal(Array("an attachment through the edge".utf8))
        let objectKey = try await api.upload(sealed, contentType: "text/plain", sessionToken: alice.token)
        let download = try await api.downloadURL(objectKey: objectKey, sessionToken: alice.token)
        let fetched = try await HTTPClient.shared.execute(HTTPClientRequest(url: download), timeout: .seconds(10))
        #expect(fetched.status == .ok)
        #expect(Array(buffer: try await fetched.body.collect(upTo: 1 << 20)) == sealed.ciphertext)

        // The edge serves none of the operators' or the cluster's routes.
        for path in ["/admin/stats", "/metrics", "/ready", "/internal/v1/frames/register", "/console"] {
            #expect(try await HTTP.get("\(edge)\(path)").status == 404, "\(path)")
        }
        // Admin, on its own instance: figures, a ban that reaches bob's socket behind the
        // edge, and its lifting.
        let stats = try await HTTP.json(.GET, "\(Self.admin)/admin/stats", token: Self.adminToken, body: nil)
        #expect(stats.status == 200)
        #expect((stats.json["identities"] as? Int ?? 0) >= 2)
        let ban = try await HTTP.json(.POST, "\(Self.admin)/admin/ban", token: Self.adminToken, body: ["whisperId": bob.whisperId, "reason": "topology test"])
        #expect(ban.status == 200)
        #expect(try await bob.events(.sessionRevoked).first?.payload(as: SessionRevoked.self) == SessionRevoked(reason: .banned))
        let lifted = try await HTTP.json(.POST, "\(Self.admin)/admin/unban", token: Self.adminToken, body: ["whisperId": bob.whisperId])
        #expect(lifted.status == 200)
        await alice.connection.close()
    }

    /// Entries each router handled so far (`whisper_messages_routed_total`).
    func routed() async throws -> [Int] {
        var counts: [Int] = []
        for router in Self.routers {
            counts.append(Int(Metrics.value(in: try await HTTP.get("\(router)/metrics").body, "whisper_messages_routed_total")))
        }
        return counts
    }

    /// A member added, or an invitee who accepted, is reached at once through the edge,
    /// whichever router takes each copy: both have the group cached from before the change.
    @Test func aMemberAddedIsReachableAtOnceThroughEveryRouter() async throws {
        #expect(Self.routers.count >= 2, "WHISPER_TOPOLOGY_ROUTERS names both routers")
        let alice = try await user(), bob = try await user(), carol = try await user(), dave = try await user()
        for peer in [bob, carol] {
            _ = try await alice.sendAndWaitForArrival("hello", to: peer)
            _ = try await peer.sendAndWaitForArrival("hello back", to: alice)
        }
        let group = try await alice.connection.createGroup(title: "Growing at the edge", memberIds: [bob.whisperId])
        func send(_ count: Int, from sender: TestUser, to recipient: TestUser) async -> Int {
            var accepted = 0
            for index in 0..<count {
                guard let copy = sender.groupCopies("copy \(index)", groupId: group.groupId, to: [recipient]).first else { continue }
                if (try? await sender.connection.send(copy)) != nil { accepted += 1 }
            }
            return accepted
        }
        // Both routers read the group as it is now.
        let start = try await routed()
        var warmed = false
        for _ in 0..<40 where !warmed {
            #expect(await send(1, from: alice, to: bob) == 1)
            warmed = zip(try await routed(), start).allSatisfy { $0 > $1 }
        }
        #expect(warmed, "both routers handled copies")

        let before = try await routed()
        let added = try await alice.connection.updateGroup(group.groupId, add: [carol.whisperId])
        #expect(added.memberIds.contains(carol.whisperId))
        #expect(await send(10, from: alice, to: carol) == 10)
        #expect(await send(10, from: carol, to: bob) == 10)
        #expect(zip(try await routed(), before).allSatisfy { $0 > $1 }, "both routers served the newcomer")

        // A stranger is invited, accepts, and is reached at once the same way.
        let invited = try await alice.connection.updateGroup(group.groupId, add: [dave.whisperId])
        #expect(invited.invited == [dave.whisperId])
        #expect(await send(6, from: alice, to: bob) == 6)
        _ = try await dave.connection.acceptGroupInvitation(group.groupId)
        #expect(await send(10, from: alice, to: dave) == 10)
        for user in [alice, bob, carol, dave] { await user.connection.close() }
    }

    @Test func liveTextThroughTheEdge() async throws {
        // The listener page and listener devices are served through the edge.
        let page = try await HTTP.get("\(edge)/listen/\(UUID().uuidString.lowercased())")
        #expect(page.status == 200)
        let sam = try await user()
        let conversation = try await sam.connection.createLiveConversation(name: "Through the edge")
        let whispering = WhisperConnection(url: endpoints.websocket, logger: TestServers.logger)
        try await whispering.connect()
        await whispering.resume(whisperId: sam.whisperId, sessionToken: sam.token)
        let whisperer = LiveWhisperer(connection: whispering, conversationId: conversation.conversationId, name: "Sam")
        let whispererLog = LiveRecord<LiveWhisperer.Event>(whispering) { try await whisperer.handle($0) }
        try await whisperer.start()
        // Two listeners: each socket may land on either gateway behind the edge.
        var listeners: [(side: LiveListener, record: LiveRecord<LiveListener.Event>)] = []
        for name in ["Ada", "Bo"] {
            let device = try await ListenerDevice.issue(websocketURL: endpoints.websocket)
            let socket = WhisperConnection(url: endpoints.websocket, listenerDevice: device, logger: TestServers.logger)
            try await socket.connect()
            let listener = LiveListener(connection: socket, conversationId: conversation.conversationId, name: name)
            let record = LiveRecord<LiveListener.Event>(socket) { try await listener.handle($0) }
            try await listener.start()
            try await whispererLog.waitFor { $0 == .request(listenerId: device.deviceId, name: name) }
            try await whisperer.admit(device.deviceId)
            try await record.waitFor { $0 == .admitted }
            listeners.append((listener, record))
        }
        try await whisperer.type("Hello")
        try await whisperer.newline()
        try await whisperer.type("through the edge")
        for (_, record) in listeners {
            try await record.waitFor { if case .text(let t) = $0 { t.past == ["Hello"] && t.live == "through the edge" } else { false } }
        }
        await whispering.close()
    }

    @Test func pushToTalkThroughTheEdge() async throws {
        // The floor keys from the edge; three members on whichever gateways, their audio
        // through the stack's coturn with credentials from turn-cred behind the edge.
        let floorKeys = try await WhisperConnection.fetchFloorKeys(websocketURL: endpoints.websocket)
        #expect(!floorKeys.keys.isEmpty)
        let alice = try await user(), bob = try await user(), carol = try await user()
        try await PushToTalkMediaTests.eachHolderIsHeardInTurn(alice, bob, carol, floorKeys: floorKeys)
        for member in [alice, bob, carol] { await member.connection.close() }
    }
}
