import Foundation
import Testing
import WhisperClient
import WhisperShared

/// Who gets into a push-to-talk channel and what the members are told (docs/protocol.md
/// section 14), tried from outside as an attacker or a careless client would.
@Suite struct PushToTalkAccessTests {
    @Test func aPrivateChannelsIDLetsNobodyInAndAPublicOnesDoes() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let owner = try await stack.user(on: 0), member = try await stack.user(on: 1), stranger = try await stack.user(on: 1)
            let closed = try await owner.connection.createChannel(name: "Closed")
            await expectRefused(.notFound, "a private channel by its ID") { _ = try await stranger.connection.joinChannel(id: closed.channelId) }
            #expect(try await owner.connection.channels().first?.members == [owner.whisperId])
            // A member names it by ID as it likes (joining again changes nothing).
            _ = try await member.connection.joinChannel(code: closed.joinCode)
            #expect(try await member.connection.joinChannel(id: closed.channelId).members == [owner.whisperId, member.whisperId])

            let open = try await owner.connection.createChannel(name: "Open", isPublic: true)
            #expect(try await stranger.connection.joinChannel(id: open.channelId).members == [owner.whisperId, stranger.whisperId])
        }
    }

    @Test func joiningAgainTellsNobody() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1), carol = try await stack.user(on: 0)
            let channel = try await alice.connection.createChannel(name: "Crew")
            _ = try await bob.connection.joinChannel(code: channel.joinCode)
            _ = try await carol.connection.joinChannel(code: channel.joinCode)
            _ = try await carol.connection.joinChannel(code: channel.joinCode)
            // Carol's floor is told after anything her second join told (one gateway, in order).
            _ = try await carol.connection.requestTalk(channel.channelId)
            for member in [alice, bob] {
                try await waitUntil { await PushToTalkTests.holders(member).last == carol.whisperId }
                let joined = await PushToTalkTests.memberships(member).filter { $0.whisperId == carol.whisperId && $0.change == .joined }
                #expect(joined.count == 1, "\(member.whisperId) heard of Carol joining \(joined.count) times")
            }
        }
    }

    @Test func theOwnerCannotLeaveItsChannel() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let owner = try await stack.user(on: 0), member = try await stack.user(on: 1)
            let channel = try await owner.connection.createChannel(name: "Kept")
            _ = try await member.connection.joinChannel(code: channel.joinCode)
            await expectRefused(.forbidden, "the owner leaves") { try await owner.connection.leaveChannel(channel.channelId) }
            #expect(try await owner.connection.channels().first?.members == [owner.whisperId, member.whisperId])
            // So every channel counts against its owner: it cannot make and abandon them.
            try await member.connection.leaveChannel(channel.channelId)
            try await owner.connection.deleteChannel(channel.channelId)
            #expect(try await owner.connection.channels().isEmpty)
        }
    }

    /// Join codes cannot be guessed online: an identity's joins that name no channel
    /// (here 3 an hour), and an address's (here 5), are bounded; once either is spent,
    /// joins are refused `RATE_LIMITED` even with a right code. Right codes cost nothing.
    @Test func wrongJoinCodesAreBoundedPerIdentityAndPerAddress() async throws {
        try await MessagingStack.start(routers: 0, gateway: {
            $0.limits[.pttJoinMissesPerIdentity] = RateLimitRule(capacity: 3, period: .seconds(3_600))
            $0.limits[.pttJoinMissesPerAddress] = RateLimitRule(capacity: 5, period: .seconds(3_600))
        }).running { stack in
            let owner = try await stack.user(on: 0), friend = try await stack.user(on: 0)
            let channel = try await owner.connection.createChannel(name: "Secret")
            for _ in 0..<5 { _ = try await friend.connection.joinChannel(code: channel.joinCode) }

            let mallory = try await stack.user(on: 0)
            for guess in ["ZZZZZZZZ", "YYYYYYYY", "XXXXXXXX"] {
                await expectRefused(.notFound, "a wrong code") { _ = try await mallory.connection.joinChannel(code: guess) }
            }
            await expectRefused(.rateLimited, "a guess after three misses, right or not") {
                _ = try await mallory.connection.joinChannel(code: channel.joinCode)
            }
            #expect(try await owner.connection.channels().first?.members.contains(mallory.whisperId) == false)
            // Another identity from the same address: two misses more spend the address's.
            let sybil = try await stack.user(on: 0)
            for guess in ["WWWWWWWW", "VVVVVVVV"] {
                await expectRefused(.notFound, "a wrong code") { _ = try await sybil.connection.joinChannel(code: guess) }
            }
            let another = try await stack.user(on: 0)
            await expectRefused(.rateLimited, "a fresh identity from a spent address") {
                _ = try await another.connection.joinChannel(code: channel.joinCode)
            }
        }
    }

    /// The owner takes access back: a removed member is out (and told), and once the code
    /// is rotated the old code lets nobody in, the removed member included.
    @Test func theOwnerRemovesAMemberAndRotatesTheCode() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let owner = try await stack.user(on: 0), friend = try await stack.user(on: 1), former = try await stack.user(on: 0)
            let channel = try await owner.connection.createChannel(name: "Team")
            _ = try await friend.connection.joinChannel(code: channel.joinCode)
            _ = try await former.connection.joinChannel(code: channel.joinCode)
            #expect(try await former.connection.requestTalk(channel.channelId).outcome == .granted)

            // Only the owner removes; the removed member is told, and so is everyone else.
            await expectRefused(.notFound, "a member removes another") { try await friend.connection.removeMember(former.whisperId, from: channel.channelId) }
            await expectRefused(.forbidden, "the owner removes itself") { try await owner.connection.removeMember(owner.whisperId, from: channel.channelId) }
            try await owner.connection.removeMember(former.whisperId, from: channel.channelId)
            let removed = PTTMembership(channelId: channel.channelId, whisperId: former.whisperId, change: .removed)
            try await waitUntil { await PushToTalkTests.memberships(former).contains(removed) }
            try await waitUntil { await PushToTalkTests.memberships(friend).contains(removed) }
            // Its floor went with it, and it can ask for nothing more.
            try await waitUntil { await PushToTalkTests.floors(friend).last.map { $0.holder == nil } ?? false }
            await expectRefused(.notFound, "the removed member asks for the floor") { _ = try await former.connection.requestTalk(channel.channelId) }

            // A new code: the old one lets nobody in; members are told the new one.
            await expectRefused(.notFound, "a member rotates the code") { _ = try await friend.connection.rotateJoinCode(channel.channelId) }
            let rotated = try await owner.connection.rotateJoinCode(channel.channelId)
            #expect(rotated.joinCode != channel.joinCode && PTTJoinCode.isValid(rotated.joinCode))
            #expect(rotated.members == [owner.whisperId, friend.whisperId])
            try await waitUntil { await friend.events.all(.pttChannel).contains { $0.payload(as: PTTChannel.self)?.joinCode == rotated.joinCode } }
            await expectRefused(.notFound, "the old code") { _ = try await former.connection.joinChannel(code: channel.joinCode) }
            // Removed for good: not even the new code lets the removed member back in.
            await expectRefused(.forbidden, "the removed member with the new code") { _ = try await former.connection.joinChannel(code: rotated.joinCode) }
            let newcomer = try await stack.user(on: 1)
            #expect(try await newcomer.connection.joinChannel(code: rotated.joinCode).members.contains(newcomer.whisperId))
        }
    }

    /// A public channel's ID and code are known to everyone nearby: a member its owner
    /// removed joins it no more by either, while anyone else still can.
    @Test func aRemovedMemberJoinsAPublicChannelNoMore() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let owner = try await stack.user(on: 0), pest = try await stack.user(on: 1), passerby = try await stack.user(on: 1)
            let channel = try await owner.connection.createChannel(name: "Open air", isPublic: true)
            _ = try await pest.connection.joinChannel(id: channel.channelId)
            try await owner.connection.removeMember(pest.whisperId, from: channel.channelId)
            await expectRefused(.forbidden, "rejoining by ID") { _ = try await pest.connection.joinChannel(id: channel.channelId) }
            await expectRefused(.forbidden, "rejoining by code") { _ = try await pest.connection.joinChannel(code: channel.joinCode) }
            #expect(try await passerby.connection.joinChannel(id: channel.channelId).members == [owner.whisperId, passerby.whisperId])
        }
    }
}
