import Foundation
import Testing
import WhisperClient
import WhisperMessaging
import WhisperShared

/// Item 2 of issue 34: a stranger could put anyone into groups, and each group took a
/// place in the victim's store of receipts (10,000, oldest dropped). Now a stranger's
/// group is an invitation: nothing stored for the victim, bounded per victim, a member
/// only by accepting.
@Suite struct GroupInvitationTests {
    /// Frames waiting in the identity's stores of owed frames, and the groups it belongs to.
    static func stored(for user: TestUser, on stack: MessagingStack) async throws -> (receipts: Int64, groups: Int64) {
        try await stack.withRedis { redis in
            var receipts: Int64 = 0
            for store in OwedStore.allCases { receipts += try await redis.send("XLEN", store.key(user.whisperId)).int ?? -1 }
            let groups = try await redis.send("HLEN", RedisKeys.groups(user.whisperId)).int ?? -1
            return (receipts, groups)
        }
    }

    @Test func aStrangersGroupsInviteTakeNothingFromTheVictimsStoreAndAreBoundedAndAnswerable() async throws {
        try await MessagingStack.start(routers: 1, router: { $0.groupInvitationsPerIdentity = 2 }).running { stack in
            let victim = try await stack.offlineUser(on: 0)
            let stranger = try await stack.user(on: 1)

            // Three groups naming the offline victim: the stranger alone is a member of each,
            // the victim only invited; nothing lands in the victim's stores.
            var groups: [String] = []
            for index in 0..<3 {
                let created = try await stranger.connection.createGroup(title: "Spam \(index)", memberIds: [victim.whisperId])
                #expect(created.memberIds == [stranger.whisperId])
                #expect(created.invited == [victim.whisperId])
                groups.append(created.groupId)
            }
            #expect(try await Self.stored(for: victim, on: stack) == (receipts: 0, groups: 0))
            // A copy to the victim is refused: not a member.
            let copy = try #require(stranger.groupCopies("hello", groupId: groups[0], to: [victim]).first)
            do {
                try await stranger.connection.send(copy)
                Issue.record("a copy to an invitee was accepted")
            } catch WhisperClientError.refused(let code, _) {
                #expect(code == .forbidden)
            }

            // Back online: the two newest invitations are open (the oldest was withdrawn).
            let back = try await stack.reconnect(victim, on: 0)
            let open = try await back.connection.groupInvitations()
            #expect(open.map(\.groupId) == [groups[2], groups[1]])
            #expect(open.allSatisfy { $0.invitedBy == stranger.whisperId && $0.memberCount == 1 })
            // Declining one closes it and tells nobody.
            try await back.connection.declineGroupInvitation(groups[1])
            #expect(try await back.connection.groupInvitations().map(\.groupId) == [groups[2]])
            // A fourth group while the victim is online: told at once, not stored.
            let fourth = try await stranger.connection.createGroup(title: "Spam 3", memberIds: [victim.whisperId])
            let told = try #require(try await back.events(.groupInvited).first?.payload(as: GroupInvitation.self))
            #expect(told.groupId == fourth.groupId)
            #expect(told.invitedBy == stranger.whisperId)
            // Accepting makes a member, and the group's members are told.
            let joined = try await back.connection.acceptGroupInvitation(groups[2])
            #expect(joined.memberIds == [stranger.whisperId, victim.whisperId])
            #expect(joined.added == [victim.whisperId])
            let heard = try #require(try await stranger.events(.groupUpdated).first?.payload(as: GroupUpdated.self))
            #expect(heard.added == [victim.whisperId])
            #expect(try await back.connection.groupInvitations().map(\.groupId) == [fourth.groupId])
            // A withdrawn or declined invitation cannot be accepted.
            for closed in [groups[0], groups[1]] {
                do {
                    _ = try await back.connection.acceptGroupInvitation(closed)
                    Issue.record("an invitation that is not open was accepted")
                } catch WhisperClientError.refused(let code, _) {
                    #expect(code == .forbidden)
                }
            }
            #expect(try await Self.stored(for: victim, on: stack) == (receipts: 0, groups: 1))
            #expect(await back.events.all(.groupCreated).isEmpty)
        }
    }
}
