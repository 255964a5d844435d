import WhisperProtocol

/// Live text: the conversations the server keeps for this identity (the Whisperer's
/// side), and a listener device's profile (docs/protocol.md section 13).
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

    // MARK: A listener device's profile (the socket's listener device)

    /// This device's profile: its ID, name and how many devices share it. Changes made on
    /// another device of the profile also arrive unasked, as `live_profile` frames on `events`.
    public func liveProfile() async throws -> LiveProfile { try await answer(LiveProfileGet(.init())) }

    /// Names this device's profile (1 to `MAX_LIVE_PERSON_NAME_CHARS` characters).
    public func renameLiveProfile(_ name: String) async throws -> LiveProfile { try await answer(LiveProfileRename(.init(name: name))) }

    /// A code that lets one more device join this device's profile, once, for 10 minutes.
    public func shareLiveProfile() async throws -> LiveProfileCode { try await answer(LiveProfileShare(.init())) }

    /// Joins the profile `code` was made for (`NOT_FOUND` for a wrong, used or expired code).
    public func joinLiveProfile(code: String) async throws -> LiveProfile { try await answer(LiveProfileJoin(.init(code: code))) }

    /// Leaves this device's profile for a new one of its own.
    public func leaveLiveProfile() async throws -> LiveProfile { try await answer(LiveProfileLeave(.init())) }

    /// Deletes this device's profile with what it holds; the device gets a new one.
    public func deleteLiveProfile() async throws -> LiveProfile { try await answer(LiveProfileDelete(.init())) }

    /// The conversations that let this device's profile in, the latest first.
    public func liveProfileConversations() async throws -> [LiveProfileConversations.Entry] {
        let list: LiveProfileConversations = try await answer(LiveProfileConversationsList(.init()))
        return list.conversations
    }

    private func answer<Answer: ServerPayload, Request: ClientPayload>(_ payload: Request) async throws -> Answer {
        let frame = try await request(payload)
        guard let answer = frame.payload(as: Answer.self) else { throw WhisperClientError.unexpectedReply(frame.type.rawValue) }
        return answer
    }
}
