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
}
