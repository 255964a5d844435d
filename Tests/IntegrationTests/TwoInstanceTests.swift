import AdminService
import AttachmentSignerService
import Crypto
import Foundation
import Testing
import WhisperClient
import WhisperMessaging
import WhisperShared

/// Several instances act as one (docs/architecture.md, "In-process memories of shared
/// state"): every flow that changes shared state, followed at once by a use of the
/// change through the other gateway, and through both routers. The stack's caches are
/// set to outlive the tests, so a change reaches another instance by its rule or not at
/// all: a rule removed fails here, not after a TTL.
@Suite(.serialized)
struct TwoInstanceTests {
    static func start() async throws -> MessagingStack {
        try await MessagingStack.start(
            routers: 2,
            router: { $0.identityCacheTTL = .seconds(3_600); $0.unknownIdentityTTL = .seconds(3_600) },
            gateway: { $0.identityCacheTTL = .seconds(3_600); $0.unknownIdentityTTL = .seconds(3_600) }
        )
    }

    /// Entries each router handled so far (`whisper_messages_routed_total`, every outcome).
    static func routed(_ stack: MessagingStack) async throws -> [Int] {
        var counts: [Int] = []
        for router in stack.routers {
            counts.append(Int(Metrics.value(in: try await stack.metricsText(of: [router]), "whisper_messages_routed_total")))
        }
        return counts
    }

    /// Sends `count` copies from `sender` to `recipient`, one after the other, and
    /// returns the refusal codes (empty: all accepted). Copies land on either router.
    static func copies(_ count: Int, from sender: TestUser, to recipient: TestUser, groupId: String) async -> [String] {
        var refusals: [String] = []
        for index in 0..<count {
            guard let copy = sender.groupCopies("copy \(index)", groupId: groupId, to: [recipient]).first else { continue }
            do {
                _ = try await sender.connection.send(copy)
            } catch let refused as WhisperClientError {
                refusals.append("\(refused)")
            } catch {
                refusals.append("\(error)")
            }
        }
        return refusals
    }

    /// Sends copies until both routers have handled some: each then holds the group in
    /// its cache, as it stood.
    static func warm(_ stack: MessagingStack, from sender: TestUser, to recipient: TestUser, groupId: String) async throws {
        let before = try await routed(stack)
        for _ in 0..<50 {
            #expect(await copies(1, from: sender, to: recipient, groupId: groupId).isEmpty)
            let now = try await routed(stack)
            if zip(now, before).allSatisfy({ $0 > $1 }) { return }
        }
        Issue.record("one router handled every copy: \(try await routed(stack))")
    }

    @Test func groupChangesAreInForceOnBothRoutersAsSoonAsTheyAreAnswered() async throws {
        try await Self.start().running { stack in
            let owner = try await stack.user(on: 0)
            let first = try await stack.user(on: 1)
            let newcomer = try await stack.user(on: 1)
            let invitee = try await stack.user(on: 0)
            try await stack.makePeers([owner, first, newcomer])
            let group = try await owner.connection.createGroup(title: "Two routers", memberIds: [first.whisperId])
            try await Self.warm(stack, from: owner, to: first, groupId: group.groupId)

            // Added: reachable at once, whichever router takes each copy, and it may send.
            let before = try await Self.routed(stack)
            let added = try await owner.connection.updateGroup(group.groupId, add: [newcomer.whisperId])
            #expect(added.memberIds.contains(newcomer.whisperId))
            #expect(await Self.copies(10, from: owner, to: newcomer, groupId: group.groupId) == [])
            #expect(await Self.copies(10, from: newcomer, to: first, groupId: group.groupId) == [])
            let after = try await Self.routed(stack)
            #expect(zip(after, before).allSatisfy { $0 > $1 }, "both routers served the copies: \(before) -> \(after)")

            // An invitation accepted: the same.
            let invited = try await owner.connection.updateGroup(group.groupId, add: [invitee.whisperId])
            #expect(invited.invited == [invitee.whisperId])
            try await Self.warm(stack, from: owner, to: first, groupId: group.groupId)
            let accepted = try await invitee.connection.acceptGroupInvitation(group.groupId)
            #expect(accepted.memberIds.contains(invitee.whisperId))
            #expect(await Self.copies(10, from: owner, to: invitee, groupId: group.groupId) == [])
            #expect(await Self.copies(10, from: invitee, to: newcomer, groupId: group.groupId) == [])

            // Renamed: nothing about membership changes, copies still pass everywhere.
            let renamed = try await first.connection.updateGroup(group.groupId, title: "Renamed")
            #expect(renamed.title == "Renamed")
            #expect(await Self.copies(6, from: first, to: owner, groupId: group.groupId) == [])

            // Removed: refused at once both ways, whichever router takes the copy.
            _ = try await owner.connection.updateGroup(group.groupId, remove: [newcomer.whisperId])
            #expect(await Self.copies(10, from: owner, to: newcomer, groupId: group.groupId).count == 10)
            #expect(await Self.copies(10, from: newcomer, to: first, groupId: group.groupId).count == 10)
            #expect(await Self.copies(4, from: invitee, to: owner, groupId: group.groupId) == [])
        }
    }

    /// A ban and its lifting, answered by admin, are in force on both gateways (which
    /// store messages themselves, with caches of their own) and both routers at once.
    @Test func aBanAndItsLiftingAreInForceOnEveryInstanceAsSoonAsTheyAreAnswered() async throws {
        try await Self.start().running { stack in
            let admin = try await RunningService.start { running in
                buildAdmin(
                    settings: AdminSettings(
                        common: TestServers.common(service: "admin", postgres: stack.database, redis: stack.redis),
                        tokens: [("ops-anna", TestServers.adminToken)]
                    ),
                    logger: TestServers.logger, onServerRunning: running
                ).assembly
            }
            try await admin.running { _ in
                _ = try await HTTP.waitFor("\(admin.baseURL)/ready") { $0.status == 200 }
                let alice = try await stack.user(on: 0)
                let carol = try await stack.user(on: 0)
                let bob = try await stack.user(on: 1)
                try await stack.makePeers([alice, bob, carol])
                // Every instance caches bob as not banned: gateway 0 (messages to him), gateway
                // 1 (his own), both routers (group copies to and from him).
                _ = try await alice.sendAndWaitForArrival("before", to: bob)
                _ = try await bob.sendAndWaitForArrival("before", to: alice)
                let group = try await alice.connection.createGroup(title: "Bans", memberIds: [bob.whisperId, carol.whisperId])
                try await Self.warm(stack, from: alice, to: bob, groupId: group.groupId)

                let banned = try await HTTP.json(.POST, "\(admin.baseURL)/admin/ban", token: TestServers.adminToken, body: ["whisperId": bob.whisperId, "reason": "spam"])
                #expect(banned.status == 200)
                await expectRefused(.forbidden, "a message to a banned identity through the other gateway") {
                    _ = try await alice.connection.send(alice.message("hi", to: bob))
                }
                #expect(await Self.copies(6, from: alice, to: bob, groupId: group.groupId).count == 6)

                let lifted = try await HTTP.json(.POST, "\(admin.baseURL)/admin/unban", token: TestServers.adminToken, body: ["whisperId": bob.whisperId])
                #expect(lifted.status == 200)
                // At once: messages to him through gateway 0, copies through either router,
                // and his own messages through gateway 1 once he signs in again.
                _ = try await alice.connection.send(alice.message("welcome back", to: bob))
                #expect(await Self.copies(6, from: alice, to: bob, groupId: group.groupId) == [])
                let back = try await ModerationTests.recover(bob, on: 1, stack: stack)
                _ = try await back.connection.send(back.message("thanks", to: alice))
                #expect(await Self.copies(6, from: back, to: carol, groupId: group.groupId) == [])
            }
        }
    }

    /// A session refreshed or ended through one gateway is what the other one sees.
    @Test func aSessionRefreshedOrEndedOnOneGatewayIsSoOnTheOther() async throws {
        try await Self.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 0)
            let refreshed = try await alice.connection.refreshSession()
            #expect(refreshed.sessionToken != alice.token)
            let renewed = TestUser(whisperId: alice.whisperId, keys: alice.keys, token: refreshed.sessionToken, connection: alice.connection, events: alice.events)
            // The new token works on the other gateway at once, the old one nowhere.
            let elsewhere = try await stack.reconnect(renewed, on: 1)
            _ = try await elsewhere.connection.send(elsewhere.message("from the other gateway", to: bob))
            let stale = try await stack.reconnect(alice, on: 1)
            await expectRefused(.notRegistered, "the token a refresh replaced") { _ = try await stale.connection.refreshSession() }

            try await elsewhere.connection.logout()
            let afterLogout = try await stack.reconnect(renewed, on: 0)
            await expectRefused(.notRegistered, "a token logged out on the other gateway") {
                _ = try await afterLogout.connection.send(afterLogout.message("after logout", to: bob))
            }

            // A busy socket (its session verified moments ago) whose identity signs in on
            // another device through the other gateway sends nothing more once that
            // sign-in is answered.
            let carol = try await stack.user(on: 0)
            _ = try await carol.sendAndWaitForArrival("busy", to: bob)
            let newDevice = try await ModerationTests.recover(carol, on: 1, stack: stack)
            let late = carol.message("from the replaced device", to: bob)
            #expect((try? await carol.connection.send(late)) == nil)
            #expect(try await carol.events(.sessionRevoked).first?.payload(as: SessionRevoked.self) == SessionRevoked(reason: .replacedByNewDevice))
            _ = try await newDevice.sendAndWaitForArrival("from the new device", to: bob)
            #expect(await !bob.events.all(.messageReceived).contains { $0.payload(as: MessageReceived.self)?.messageId == late.messageId })
        }
    }

    /// A new identity's keys are served, and messages to it accepted, by every instance
    /// as soon as its registration is answered.
    @Test func aNewIdentityIsKnownEverywhereAsSoonAsItIsRegistered() async throws {
        try await Self.start().running { stack in
            let alice = try await stack.user(on: 1)
            let bob = try await stack.user(on: 0)
            // Gateway 1 has looked alice's contacts up before: its cache is warm.
            _ = try await alice.sendAndWaitForArrival("warm", to: bob)
            for _ in 0..<3 {
                let newcomer = try await stack.user(on: 0)
                let api = WhisperAPI(endpoints: WhisperEndpoints(websocket: stack.websocketURL(1), auth: stack.auth.baseURL, attachments: "", turn: ""))
                let keys = try await api.keys(of: newcomer.whisperId, sessionToken: alice.token)
                #expect(keys.keys == newcomer.peerKeys)
                _ = try await alice.sendAndWaitForArrival("hello", to: newcomer)
            }
        }
    }

    /// Live text: a listener let in through one gateway is reached at once; one let go
    /// is reached no more, and its own frames are refused on its gateway at once.
    @Test func aListenerLetInOrLetGoIsSoOnItsGatewayAtOnce() async throws {
        try await Self.start().running { stack in
            let (_, conversation, whisperer, ada) = try await LiveHarness.oneJoined(stack)
            try await whisperer.side.type("hi")
            try await ada.record.waitFor { if case .text(let text) = $0 { return text.live.contains("hi") } else { return false } }

            try await whisperer.side.refuse(ada.id)
            let sealed = try LiveCrypto.sealPacket(
                LiveTextPacket(.rereadRequest), key: SymmetricKey(size: .bits256), conversationId: conversation.conversationId, keyId: 1,
                fromWhisperer: false
            )
            await expectRefused(.forbidden, "a packet from a listener let go") {
                _ = try await ada.connection.request(LiveListenerPacket(.init(conversationId: conversation.conversationId, keyId: 1, packet: sealed)))
            }
            try await ada.record.waitFor { $0 == .removed }
        }
    }

    /// Push-to-talk: joining, leaving and deleting through one gateway are in force for
    /// the floor asked for through the other at once.
    @Test func pushToTalkMembershipIsInForceOnTheOtherGatewayAtOnce() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let owner = try await stack.user(on: 0)
            let member = try await stack.user(on: 1)
            let channel = try await owner.connection.createChannel(name: "Two gateways")
            _ = try await member.connection.joinChannel(code: channel.joinCode)
            #expect(try await member.connection.requestTalk(channel.channelId).outcome == .granted)
            #expect(try await member.connection.releaseTalk(channel.channelId).outcome == .released)
            try await member.connection.leaveChannel(channel.channelId)
            await expectRefused(.notFound, "the floor of a channel left") { _ = try await member.connection.requestTalk(channel.channelId) }
            _ = try await member.connection.joinChannel(code: channel.joinCode)
            try await owner.connection.deleteChannel(channel.channelId)
            await expectRefused(.notFound, "the floor of a deleted channel") { _ = try await member.connection.requestTalk(channel.channelId) }
        }
    }
    /// Presence between two who just became direct peers (a message each way, through
    /// different gateways) is answered by the other gateway at once.
    @Test func presenceIsUnlockedOnEveryGatewayOnceTwoBecomePeers() async throws {
        try await Self.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            #expect(try await alice.connection.subscribePresence([bob.whisperId]).peers.isEmpty)
            _ = try await alice.sendAndWaitForArrival("hello", to: bob)
            _ = try await bob.sendAndWaitForArrival("hello back", to: alice)
            let elsewhere = try await stack.reconnect(alice, on: 1)
            let snapshot = try await elsewhere.connection.subscribePresence([bob.whisperId])
            #expect(snapshot.peers == [PresenceSnapshot.Peer(whisperId: bob.whisperId, status: .online)])
        }
    }

    /// The attachment quota, spent through one attachment-signer, is spent for the other
    /// at once (one Postgres transaction per presign; nothing kept in memory).
    @Test func anAttachmentQuotaSpentThroughOneSignerIsSpentForTheOther() async throws {
        let first = try await AttachmentTests.start { $0.quotaUnsentBytes = 5_000 }
        try await first.stack.running { stack in
            try await first.service.running { _ in
                let second = try await RunningService.start { running in
                    var settings = AttachmentSignerSettings(
                        common: TestServers.common(service: "attachment-signer", postgres: stack.database, redis: stack.redis), s3: first.moto.settings
                    )
                    settings.quotaUnsentBytes = 5_000
                    return buildAttachmentSigner(settings: settings, logger: TestServers.logger, onServerRunning: running).assembly
                }
                try await second.running { _ in
                    let other = AttachmentTests.Signer(stack: stack, moto: first.moto, store: first.store, service: second)
                    let alice = try await stack.user(on: 0)
                    #expect(try await AttachmentTests.presign(first, alice, size: 4_000).status == 200)
                    #expect(try await AttachmentTests.presign(other, alice, size: 2_000).status == 429)
                    #expect(try await AttachmentTests.presign(other, alice, size: 1_000).status == 200)
                    #expect(try await AttachmentTests.presign(first, alice, size: 100).status == 429)
                }
            }
        }
    }
}
