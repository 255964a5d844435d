import Foundation
import PostgresNIO
@testable import RouterService
import Testing
import WhisperClient
import WhisperMessaging
import WhisperShared

/// Groups with pairwise fan-out (docs/protocol.md section 6) on two gateways and
/// two routers: membership in Postgres, checked for every copy against the recipient's
/// record in Redis.
@Suite(.serialized)
struct GroupTests {
    @Test func aFiveMemberGroupDeliversEachSendOnceToEveryOtherMember() async throws {
        try await MessagingStack.start().running { stack in
            let owner = try await stack.user(on: 0)
            var members: [TestUser] = []
            for index in 0..<4 { members.append(try await stack.user(on: index % 2 == 0 ? 1 : 0)) }

            try await stack.makePeers([owner] + members)
            let created = try await owner.connection.createGroup(title: "Weekend climbing", memberIds: members.map(\.whisperId))
            #expect(Format.isGroupID(created.groupId))
            #expect(created.memberIds == [owner.whisperId] + members.map(\.whisperId))
            #expect(created.ownerId == owner.whisperId)
            #expect(created.createdBy == owner.whisperId)
            for member in members {
                let event = try #require(try await member.events(.groupCreated).first?.payload(as: GroupCreated.self))
                #expect(event.groupId == created.groupId)
                #expect(event.memberIds.count == 5)
            }

            // Two messages, each sent twice (a resend is answered, never delivered again).
            var sentIds: [String] = []
            for text in ["first to the group", "second to the group"] {
                let copies = owner.groupCopies(text, groupId: created.groupId, to: members)
                #expect(copies.count == 4)
                for _ in 0..<2 {
                    let outcomes = await owner.connection.sendGroup(copies)
                    #expect(outcomes.count == 4)
                    #expect(outcomes.values.allSatisfy { (try? $0.get())?.messageId == copies[0].messageId })
                }
                sentIds.append(copies[0].messageId)
            }
            for member in members {
                let received = try await member.events(.messageReceived, count: 2).compactMap { $0.payload(as: MessageReceived.self) }
                #expect(received.map(\.messageId) == sentIds)
                #expect(received.allSatisfy { $0.groupId == created.groupId && $0.from == owner.whisperId && $0.to == member.whisperId })
                let texts = try received.map {
                    String(decoding: try MessageCrypto.open($0, by: (member.whisperId, member.keys), sender: owner.peerKeys), as: UTF8.self)
                }
                #expect(texts == ["first to the group", "second to the group"])
            }
            // Copies are messages like any other: a receipt reaches the sender.
            let first = try #require(try await members[0].events(.messageReceived).first?.payload(as: MessageReceived.self))
            try await members[0].connection.acknowledge(first)
            let receipt = try #require(try await owner.events(.messageDelivered).first?.payload(as: MessageDelivered.self))
            #expect(receipt.messageId == first.messageId)
            #expect(receipt.from == members[0].whisperId)
            for member in members { #expect(await member.events.all(.messageReceived).count == 2) }
        }
    }

    @Test func aRemovedMemberGetsNothingAfterTheRemovalEvenFromCopiesAlreadyInTheStream() async throws {
        try await MessagingStack.start().running { stack in
            let owner = try await stack.user(on: 0)
            let stays = try await stack.user(on: 1)
            let leaves = try await stack.user(on: 1)
            try await stack.makePeers([owner, stays, leaves])
            let created = try await owner.connection.createGroup(title: "Book club", memberIds: [stays.whisperId, leaves.whisperId])

            // Both routers learn the group (each handles some of these copies).
            for index in 0..<6 {
                let outcomes = await stays.connection.sendGroup(stays.groupCopies("warm \(index)", groupId: created.groupId, to: [owner, leaves]))
                #expect(outcomes.values.allSatisfy { (try? $0.get()) != nil })
            }
            _ = try await leaves.events(.messageReceived, count: 6)

            let updated = try await owner.connection.updateGroup(created.groupId, remove: [leaves.whisperId])
            #expect(updated.memberIds == [owner.whisperId, stays.whisperId])
            #expect(updated.removed == [leaves.whisperId])
            let farewell = try #require(try await leaves.events(.groupUpdated).first?.payload(as: GroupUpdated.self))
            #expect(farewell.removed == [leaves.whisperId])
            #expect(farewell.memberIds.isEmpty)
            let told = try #require(try await stays.events(.groupUpdated).first?.payload(as: GroupUpdated.self))
            #expect(told.memberIds == [owner.whisperId, stays.whisperId])

            // Copies to the removed member written into the router stream as a gateway
            // writes them, handled by routers that may still hold the old membership.
            let depthBefore = try await stack.pendingDepth(leaves.whisperId)
            let requestIds = (0..<10).map { _ in UUID().uuidString.lowercased() }
            let socket = try #require(await stays.socket(in: stack))
            try await stack.withRedis { redis in
                for requestId in requestIds {
                    let copy = try #require(stays.groupCopies("too late", groupId: created.groupId, to: [leaves]).first)
                    let entry = RouterStream.Entry(
                        gateway: socket.gateway, connId: socket.connId, whisperId: stays.whisperId,
                        type: .groupSendMessage, requestId: requestId, payload: try RouterStream.storedPayload(copy),
                        receivedAt: Clock.millisecondsNow()
                    )
                    try await redis.send(entry.addCommand(in: redis.configuration.streamShards))
                }
            }
            let refusals = try await stays.events(.error, count: 10)
            #expect(refusals.compactMap { $0.payload(as: ErrorPayload.self) }.allSatisfy { $0.code == .forbidden })
            #expect(Set(refusals.compactMap(\.requestId)) == Set(requestIds))
            // And through the front door: refused the same way, from and to the removed member.
            let toLeaver = try #require(owner.groupCopies("after", groupId: created.groupId, to: [leaves]).first)
            await #expect(throws: WhisperClientError.self) { try await owner.connection.send(toLeaver) }
            let fromLeaver = try #require(leaves.groupCopies("still here?", groupId: created.groupId, to: [owner]).first)
            do {
                try await leaves.connection.send(fromLeaver)
                Issue.record("a removed member's copy was accepted")
            } catch WhisperClientError.refused(let code, _) {
                #expect(code == .forbidden)
            }
            #expect(try await stack.pendingDepth(leaves.whisperId) == depthBefore)
            #expect(await leaves.events.all(.messageReceived).count == 6)
            #expect(try await stack.pendingDepth(owner.whisperId) == 6)
        }
    }

    @Test func aNonMembersSendIsRefusedAndNothingIsStored() async throws {
        try await MessagingStack.start().running { stack in
            let owner = try await stack.user(on: 0)
            let member = try await stack.user(on: 1)
            let outsider = try await stack.user(on: 0)
            try await stack.makePeers([owner, member])
            let created = try await owner.connection.createGroup(title: "Private", memberIds: [member.whisperId])

            let copy = try #require(outsider.groupCopies("let me in", groupId: created.groupId, to: [member]).first)
            do {
                try await outsider.connection.send(copy)
                Issue.record("a non-member's copy was accepted")
            } catch WhisperClientError.refused(let code, _) {
                #expect(code == .forbidden)
            }
            // A copy to someone outside the group, from a member, is refused too.
            let stray = try #require(owner.groupCopies("wrong person", groupId: created.groupId, to: [outsider]).first)
            await #expect(throws: WhisperClientError.refused(.forbidden, "to is not a member of this group")) { try await owner.connection.send(stray) }
            // A group that does not exist.
            let unknown = try #require(owner.groupCopies("nobody", groupId: "grp-" + RandomID.uuid(), to: [member]).first)
            await #expect(throws: WhisperClientError.refused(.notFound, "no such group")) { try await owner.connection.send(unknown) }
            // A copy signed over `to` instead of the groupId does not verify.
            var misSigned = try #require(owner.groupCopies("sig", groupId: created.groupId, to: [member]).first)
            let oneToOne = owner.message("sig", to: member)
            misSigned.nonce = oneToOne.nonce
            misSigned.ciphertext = oneToOne.ciphertext
            misSigned.sig = oneToOne.sig
            misSigned.messageId = oneToOne.messageId
            misSigned.timestamp = oneToOne.timestamp
            await #expect(throws: WhisperClientError.self) { try await owner.connection.send(misSigned) }

            #expect(try await stack.pendingDepth(member.whisperId) == 0)
            #expect(try await stack.pendingDepth(outsider.whisperId) == 0)
            #expect(await member.events.all(.messageReceived).isEmpty)
        }
    }

    @Test func anOfflineMemberGetsGroupEventsAndMessagesThroughFetchPending() async throws {
        try await MessagingStack.start().running { stack in
            let owner = try await stack.user(on: 0)
            let online = try await stack.user(on: 1)
            let away = try await stack.offlineUser(on: 1)
            try await stack.makePeers([owner, online, away])
            let created = try await owner.connection.createGroup(title: "Trip", memberIds: [online.whisperId, away.whisperId])
            let copies = owner.groupCopies("see you at 8", groupId: created.groupId, to: [online, away])
            #expect(await owner.connection.sendGroup(copies).values.allSatisfy { (try? $0.get()) != nil })
            _ = try await owner.connection.updateGroup(created.groupId, title: "Trip to the coast")
            _ = try await online.events(.groupUpdated)
            #expect(try await stack.storedGroupEvents(away.whisperId) == 2)
            #expect(try await stack.storedReceipts(away.whisperId) == 0)

            let back = try await stack.reconnect(away, on: 0)
            let page = try await back.connection.fetchPending()
            // The membership events come before the page, oldest first.
            let createdEvent = try #require(try await back.events(.groupCreated).first?.payload(as: GroupCreated.self))
            #expect(createdEvent.groupId == created.groupId)
            let renamed = try #require(try await back.events(.groupUpdated).first?.payload(as: GroupUpdated.self))
            #expect(renamed.title == "Trip to the coast")
            #expect(renamed.memberIds.count == 3)
            let message = try #require(page.messages.first)
            #expect(page.messages.count == 1)
            #expect(message.groupId == created.groupId)
            let text = try MessageCrypto.open(message, by: (away.whisperId, away.keys), sender: owner.peerKeys)
            #expect(String(decoding: text, as: UTF8.self) == "see you at 8")
            // Taken once written: a second fetch does not repeat them.
            try await waitUntil { try await stack.storedGroupEvents(away.whisperId) == 0 }
        }
    }

    @Test func rolesDecideWhoMayChangeWhatAndTheOwnerCanLeave() async throws {
        try await MessagingStack.start().running { stack in
            let owner = try await stack.user(on: 0)
            let first = try await stack.user(on: 1)
            let second = try await stack.user(on: 0)
            let newcomer = try await stack.user(on: 1)
            try await stack.makePeers([owner, first, second, newcomer])
            let created = try await owner.connection.createGroup(title: "Roles", memberIds: [first.whisperId, second.whisperId])

            await #expect(throws: WhisperClientError.refused(.forbidden, "only the group's owner may add or remove other members")) {
                try await first.connection.updateGroup(created.groupId, add: [newcomer.whisperId])
            }
            await #expect(throws: WhisperClientError.refused(.forbidden, "only the group's owner may add or remove other members")) {
                try await first.connection.updateGroup(created.groupId, remove: [second.whisperId])
            }
            await #expect(throws: WhisperClientError.refused(.forbidden, "not a member of this group")) {
                try await newcomer.connection.updateGroup(created.groupId, title: "Mine")
            }
            await #expect(throws: WhisperClientError.refused(.notFound, "no such identity: WSP-AAAA-AAAA-AAAA")) {
                try await owner.connection.updateGroup(created.groupId, add: ["WSP-AAAA-AAAA-AAAA"])
            }
            // Any member may rename.
            let renamed = try await first.connection.updateGroup(created.groupId, title: "Renamed")
            #expect(renamed.title == "Renamed")
            #expect(renamed.ownerId == owner.whisperId)
            // The owner adds, then leaves: the earliest member left becomes the owner.
            let grown = try await owner.connection.updateGroup(created.groupId, add: [newcomer.whisperId])
            #expect(grown.added == [newcomer.whisperId])
            _ = try await newcomer.events(.groupUpdated)
            let left = try await owner.connection.updateGroup(created.groupId, remove: [owner.whisperId])
            #expect(left.removed == [owner.whisperId])
            let handedOver = try #require(try await second.events(.groupUpdated, count: 3).last?.payload(as: GroupUpdated.self))
            #expect(handedOver.ownerId == first.whisperId)
            #expect(handedOver.memberIds == [first.whisperId, second.whisperId, newcomer.whisperId])
            // The new owner may remove; the former owner may no longer send.
            _ = try await first.connection.updateGroup(created.groupId, remove: [newcomer.whisperId])
            let fromFormer = try #require(owner.groupCopies("hello?", groupId: created.groupId, to: [first]).first)
            await #expect(throws: WhisperClientError.refused(.forbidden, "the sender is not a member of this group")) {
                try await owner.connection.send(fromFormer)
            }
        }
    }

    @Test func aResentCreateWithTheSameRequestIdNamesTheSameGroup() async throws {
        try await MessagingStack.start().running { stack in
            let owner = try await stack.user(on: 0)
            let member = try await stack.user(on: 1)
            try await stack.makePeers([owner, member])
            let request = GroupCreate(sessionToken: owner.token, .init(title: "Once", memberIds: [member.whisperId]))
            let requestId = UUID().uuidString.lowercased()
            let first = try await owner.connection.request(request, requestId: requestId)
            let second = try await owner.connection.request(request, requestId: requestId)
            let a = try #require(first.payload(as: GroupCreated.self))
            let b = try #require(second.payload(as: GroupCreated.self))
            #expect(a.groupId == b.groupId)
            let count = try await stack.withPostgres { client in
                try await client.query("SELECT count(*)::int8 FROM groups WHERE created_by = \(owner.whisperId)").decode(Int64.self).first { _ in true }
            }
            #expect(count == 1)
        }
    }
}

extension TestUser {
    /// One copy per member of a group message from this user.
    func groupCopies(_ text: String, groupId: String, to members: [TestUser], messageId: String = RandomID.uuid()) -> [GroupSendMessage] {
        MessageCrypto.makeGroupCopies(
            Array(text.utf8), groupId: groupId, from: (whisperId, keys), to: members.map(\.peerKeys), sessionToken: token, messageId: messageId
        )
    }

    /// Where this user's socket is (its presence record).
    func socket(in stack: MessagingStack) async -> PresenceRecord? {
        try? await stack.withRedis { try await PresenceStore(redis: $0).lookup(whisperId) }
    }
}

/// A router whose cached membership predates a change, as one that read the group (it
/// had a copy in hand) just before another router answered the change: the store
/// script's version check stops a copy the old view admits, and the refused identity's
/// record makes the router read the group again before a refusal from the old view.
@Suite(.serialized)
struct GroupCacheTests {
    @Test func aRouterHoldingTheOldMembershipRefusesCopiesToAndFromARemovedMember() async throws {
        try await MessagingStack.start().running { stack in
            let owner = try await stack.user(on: 0)
            let stays = try await stack.user(on: 1)
            let leaves = try await stack.user(on: 1)
            try await stack.makePeers([owner, stays, leaves])
            let created = try await owner.connection.createGroup(title: "Stale", memberIds: [stays.whisperId, leaves.whisperId])

            try await StaleRouter.run(on: stack) { stale in
                // This router learns the group while `leaves` is a member.
                let before = try #require(try await stale.directory.view(created.groupId).view)
                #expect(before.isMember(leaves.whisperId))

                // Another router (the stack's) removes `leaves`; the change is answered.
                _ = try await owner.connection.updateGroup(created.groupId, remove: [leaves.whisperId])

                let toLeaver = try #require(stays.groupCopies("to a former member", groupId: created.groupId, to: [leaves]).first)
                #expect(try await stale.handle(toLeaver, from: stays) == .refused)
                stale.directory.remember(created.groupId, before)
                let fromLeaver = try #require(leaves.groupCopies("from a former member", groupId: created.groupId, to: [stays]).first)
                #expect(try await stale.handle(fromLeaver, from: leaves) == .refused)
                // A copy between members still passes, after the router read the group again.
                stale.directory.remember(created.groupId, before)
                let between = try #require(stays.groupCopies("still here", groupId: created.groupId, to: [owner]).first)
                let outcome = try await stale.handle(between, from: stays)
                #expect(outcome == .delivered || outcome == .queued)
                #expect(try await stale.directory.view(created.groupId).view?.isMember(leaves.whisperId) == false)
            }
            #expect(try await stack.pendingDepth(leaves.whisperId) == 0)
            #expect(try await stack.pendingDepth(stays.whisperId) == 0)
            #expect(try await stack.pendingDepth(owner.whisperId) == 1)
            #expect(await leaves.events.all(.messageReceived).isEmpty)
        }
    }

    /// The defect of a router that cached a group before a member was added: it refused
    /// copies to the newcomer (and from it) until its cache lapsed.
    @Test func aRouterHoldingTheOldMembershipAdmitsCopiesToAndFromAnAddedMember() async throws {
        try await MessagingStack.start().running { stack in
            let owner = try await stack.user(on: 0)
            let first = try await stack.user(on: 1)
            let newcomer = try await stack.user(on: 1)
            try await stack.makePeers([owner, first, newcomer])
            let created = try await owner.connection.createGroup(title: "Growing", memberIds: [first.whisperId])

            try await StaleRouter.run(on: stack) { stale in
                let before = try #require(try await stale.directory.view(created.groupId).view)
                #expect(!before.isMember(newcomer.whisperId))
                let added = try await owner.connection.updateGroup(created.groupId, add: [newcomer.whisperId])
                #expect(added.memberIds.contains(newcomer.whisperId))

                let toNewcomer = try #require(owner.groupCopies("welcome", groupId: created.groupId, to: [newcomer]).first)
                #expect(try await stale.handle(toNewcomer, from: owner) != .refused)
                stale.directory.remember(created.groupId, before)
                let fromNewcomer = try #require(newcomer.groupCopies("thanks", groupId: created.groupId, to: [first]).first)
                #expect(try await stale.handle(fromNewcomer, from: newcomer) != .refused)
            }
            #expect(try await stack.pendingDepth(newcomer.whisperId) + (await newcomer.events.all(.messageReceived).count) >= 1)
        }
    }

    /// The same for an invitee who accepted, through a router that cached the group
    /// while the invitation was open.
    @Test func aRouterHoldingTheOldMembershipAdmitsCopiesToAnInviteeWhoAccepted() async throws {
        try await MessagingStack.start().running { stack in
            let owner = try await stack.user(on: 0)
            let friend = try await stack.user(on: 0)
            let invitee = try await stack.user(on: 1)
            try await stack.makePeers([owner, friend])
            let created = try await owner.connection.createGroup(title: "Invited", memberIds: [friend.whisperId, invitee.whisperId])
            #expect(created.invited == [invitee.whisperId])

            try await StaleRouter.run(on: stack) { stale in
                let before = try #require(try await stale.directory.view(created.groupId).view)
                #expect(!before.isMember(invitee.whisperId))
                let accepted = try await invitee.connection.updateGroup(created.groupId, add: [invitee.whisperId])
                #expect(accepted.memberIds.contains(invitee.whisperId))

                let toInvitee = try #require(owner.groupCopies("glad you came", groupId: created.groupId, to: [invitee]).first)
                #expect(try await stale.handle(toInvitee, from: owner) != .refused)
                stale.directory.remember(created.groupId, before)
                let fromInvitee = try #require(invitee.groupCopies("hello all", groupId: created.groupId, to: [friend]).first)
                #expect(try await stale.handle(fromInvitee, from: invitee) != .refused)
            }
        }
    }

    /// A router that remembered that a group did not exist (someone sent to its ID
    /// first) admits the group's copies once its creation is answered.
    @Test func aRouterThatFoundNoGroupAdmitsCopiesOnceItIsCreated() async throws {
        try await MessagingStack.start().running { stack in
            let owner = try await stack.user(on: 0)
            let member = try await stack.user(on: 1)
            try await stack.makePeers([owner, member])
            let requestId = RandomID.uuid()
            let groupId = GroupDesk.groupId(creator: owner.whisperId, requestId: requestId)

            try await StaleRouter.run(on: stack) { stale in
                let early = try #require(owner.groupCopies("too early", groupId: groupId, to: [member]).first)
                #expect(try await stale.handle(early, from: owner) == .refused)
                #expect(try await stale.directory.view(groupId).fromMemory)

                let answer = try await owner.connection.request(
                    GroupCreate(sessionToken: owner.token, .init(title: "Named ahead", memberIds: [member.whisperId])), requestId: requestId
                )
                #expect(answer.payload(as: GroupCreated.self)?.groupId == groupId)
                let copy = try #require(owner.groupCopies("now it exists", groupId: groupId, to: [member]).first)
                #expect(try await stale.handle(copy, from: owner) != .refused)
            }
        }
    }
}

/// A router of the test's own on the stack's Postgres and Redis, whose group cache the
/// test sets (`directory`), handling the stream entries the test hands it.
struct StaleRouter {
    let router: MessageRouter
    let directory: GroupDirectory

    static func run(on stack: MessagingStack, _ body: @Sendable (StaleRouter) async throws -> Void) async throws {
        try await stack.withPostgres { postgres in
            try await stack.withRedis { redis in
                let metrics = ServiceMetrics(service: "router", instanceID: "stale")
                let identities = IdentityCache(postgres: postgres, logger: TestServers.logger, metrics: metrics, ttl: .seconds(30))
                let directory = GroupDirectory(postgres: postgres, logger: TestServers.logger, metrics: metrics)
                let settings = TestServers.routerSettings(stack.database, redis: stack.redis)
                let routing = RoutingMetrics(metrics: metrics)
                let groups = GroupDesk(
                    postgres: postgres, redis: redis, directory: directory, identities: identities, events: OwedFrames(redis: redis),
                    logger: TestServers.logger
                )
                let router = MessageRouter(
                    redis: redis,
                    sending: MessageSending(
                        checks: MessageChecks(identities: identities), attachments: AttachmentRecipients(postgres: postgres),
                        pending: PendingQueue(redis: redis), redis: redis, pairLimit: settings.limits[.sendPerPair], metrics: routing
                    ),
                    pending: PendingQueue(redis: redis), receipts: OwedFrames(redis: redis),
                    groups: groups,
                    accounts: AccountDesk(
                        groups: groups, deletion: AccountDeletion(postgres: postgres, redis: redis, logger: TestServers.logger), postgres: postgres,
                        logger: TestServers.logger
                    ),
                    calls: CallDesk(
                        redis: redis, identities: identities, frames: OwedFrames(redis: redis),
                        settings: .init(ringTimeout: .seconds(45), answeredTTL: .seconds(3_600), sweepInterval: .seconds(1)),
                        metrics: CallMetrics(metrics: metrics), logger: TestServers.logger
                    ),
                    settings: settings, metrics: routing, logger: TestServers.logger
                )
                try await body(StaleRouter(router: router, directory: directory))
            }
        }
    }

    /// Handles `copy` as a stream entry from `sender` (whose gateway is gone: answers go nowhere).
    func handle(_ copy: GroupSendMessage, from sender: TestUser) async throws -> RoutingOutcome {
        try await router.handle(RouterStream.Entry(
            gateway: "gone", connId: "gone", whisperId: sender.whisperId, type: .groupSendMessage, requestId: nil,
            payload: try RouterStream.storedPayload(copy), receivedAt: Clock.millisecondsNow()
        ))
    }
}
