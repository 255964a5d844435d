import WhisperProtocol

/// Live text, the Whisperer's side: the conversations the server keeps for this identity
/// (docs/protocol.md section 13).
extension WhisperConnection {
    /// Creates a conversation; refused with `FORBIDDEN` past `MAX_LIVE_CONVERSATIONS`.
    public func createLiveConversation(name: String) async throws -> LiveConversation {
        try await answer(LiveConversationCreate(sessionToken: try token(), .init(name: name)))
    }

    /// Renames one of this identity's conversations (`NOT_FOUND` for any other).
    public func renameLiveConversation(_ conversationId: String, to name: String) async throws -> LiveConversation {
        try await answer(LiveConversationRename(sessionToken: try token(), .init(conversationId: conversationId, name: name)))
    }

    /// Deletes one of this identity's conversations (`NOT_FOUND` for any other).
    public func deleteLiveConversation(_ conversationId: String) async throws {
        let _: LiveConversationDeleted = try await answer(LiveConversationDelete(sessionToken: try token(), .init(conversationId: conversationId)))
    }

    /// This identity's conversations, newest first.
    public func liveConversations() async throws -> [LiveConversation] {
        let list: LiveConversations = try await answer(LiveConversationsList(sessionToken: try token()))
        return list.conversations
    }

    private func answer<Answer: ServerPayload, Request: ClientPayload>(_ payload: Request) async throws -> Answer {
        let frame = try await request(payload)
        guard let answer = frame.payload(as: Answer.self) else { throw WhisperClientError.unexpectedReply(frame.type.rawValue) }
        return answer
    }
}
