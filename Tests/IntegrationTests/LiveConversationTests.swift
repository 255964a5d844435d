import Foundation
import Testing
import WhisperClient
import WhisperShared

/// Live text, the Whisperer's conversations (docs/protocol.md section 13): kept in
/// Postgres, each identity's own.
@Suite struct LiveConversationTests {
    @Test func aWhispererCreatesListsRenamesAndDeletesItsConversations() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            var whisperer = try await stack.user(on: 0)
            let stranger = try await stack.user(on: 1)

            let kitchen = try await whisperer.connection.createLiveConversation(name: "Kitchen table")
            let clinic = try await whisperer.connection.createLiveConversation(name: "Clinic ✚ visits")
            #expect(kitchen.conversationId != clinic.conversationId)
            #expect(Format.isUUID(kitchen.conversationId))
            // Newest first; kept across sockets (Postgres, not the socket): from here on the
            // Whisperer's new socket, on the other gateway (the old one is superseded).
            whisperer = try await stack.reconnect(whisperer, on: 1)
            #expect(try await whisperer.connection.liveConversations().map(\.conversationId) == [clinic.conversationId, kitchen.conversationId])

            let renamed = try await whisperer.connection.renameLiveConversation(kitchen.conversationId, to: "Dinner with the Okafors")
            #expect(renamed.name == "Dinner with the Okafors" && renamed.createdAt == kitchen.createdAt && renamed.updatedAt >= kitchen.updatedAt)
            #expect(try await whisperer.connection.liveConversations().first { $0.conversationId == kitchen.conversationId }?.name == "Dinner with the Okafors")

            // Someone else's conversation is answered like none at all.
            await expectRefused(.notFound, "rename of another's") { _ = try await stranger.connection.renameLiveConversation(kitchen.conversationId, to: "mine now") }
            await expectRefused(.notFound, "delete of another's") { try await stranger.connection.deleteLiveConversation(kitchen.conversationId) }
            #expect(try await stranger.connection.liveConversations().isEmpty)
            #expect(try await whisperer.connection.liveConversations().count == 2)

            try await whisperer.connection.deleteLiveConversation(clinic.conversationId)
            #expect(try await whisperer.connection.liveConversations().map(\.conversationId) == [kitchen.conversationId])
            await expectRefused(.notFound, "delete twice") { try await whisperer.connection.deleteLiveConversation(clinic.conversationId) }
        }
    }

    @Test func namesAndCountsAreBounded() async throws {
        try await MessagingStack.start(routers: 0, gateway: { $0.limits[.liveConversationsPerIdentity] = RateLimitRule(capacity: 1_000, period: .seconds(60)) }).running { stack in
            let whisperer = try await stack.user(on: 0)
            await expectRefused(.invalidPayload, "empty name") { _ = try await whisperer.connection.createLiveConversation(name: "") }
            let longest = String(repeating: "é", count: Limits.MAX_LIVE_CONVERSATION_NAME_CHARS)
            _ = try await whisperer.connection.createLiveConversation(name: longest)
            await expectRefused(.invalidPayload, "name too long") { _ = try await whisperer.connection.createLiveConversation(name: longest + "e") }
            await expectRefused(.invalidPayload, "not a UUID") { try await whisperer.connection.deleteLiveConversation("kitchen") }
            for index in 1..<Limits.MAX_LIVE_CONVERSATIONS {
                _ = try await whisperer.connection.createLiveConversation(name: "conversation \(index)")
            }
            await expectRefused(.forbidden, "one past the cap") { _ = try await whisperer.connection.createLiveConversation(name: "one too many") }
            #expect(try await whisperer.connection.liveConversations().count == Limits.MAX_LIVE_CONVERSATIONS)
        }
    }

    @Test func conversationFramesAreRateLimitedPerIdentity() async throws {
        try await MessagingStack.start(routers: 0, gateway: { $0.limits[.liveConversationsPerIdentity] = RateLimitRule(capacity: 3, period: .seconds(3_600)) }).running { stack in
            let whisperer = try await stack.user(on: 0)
            for _ in 0..<3 { _ = try await whisperer.connection.liveConversations() }
            await expectRefused(.rateLimited, "fourth within the hour") { _ = try await whisperer.connection.liveConversations() }
        }
    }
}
