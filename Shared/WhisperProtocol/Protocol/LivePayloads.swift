/// Live text (docs/protocol.md section 13): a Whisperer's long-lived conversations, each
/// with an ID and a name, kept by the server so that listeners can be let in to them.

/// Creates a conversation owned by the session's identity.
public struct LiveConversationCreate: PrivilegedPayload, Equatable {
    public enum Keys: String, CodingKey, CaseIterable { case protocolVersion, cryptoVersion, sessionToken, name }
    public typealias CodingKeys = Keys
    public static let frameType = ClientFrameType.liveConversationCreate
    public var protocolVersion: Int
    public var cryptoVersion: Int
    public var sessionToken: String
    /// Shown to listeners who ask to join (1 to 128 characters).
    public var name: String

    public init(protocolVersion: Int = 1, cryptoVersion: Int = 1, sessionToken: String, name: String) {
        self.protocolVersion = protocolVersion
        self.cryptoVersion = cryptoVersion
        self.sessionToken = sessionToken
        self.name = name
    }

    public func validate() throws(FieldViolation) {
        try Checker().text(name, "name", characters: 1...Limits.MAX_LIVE_CONVERSATION_NAME_CHARS)
    }
}

/// Renames one of the session identity's conversations.
public struct LiveConversationRename: PrivilegedPayload, Equatable {
    public enum Keys: String, CodingKey, CaseIterable { case protocolVersion, cryptoVersion, sessionToken, conversationId, name }
    public typealias CodingKeys = Keys
    public static let frameType = ClientFrameType.liveConversationRename
    public var protocolVersion: Int
    public var cryptoVersion: Int
    public var sessionToken: String
    public var conversationId: String
    public var name: String

    public init(protocolVersion: Int = 1, cryptoVersion: Int = 1, sessionToken: String, conversationId: String, name: String) {
        self.protocolVersion = protocolVersion
        self.cryptoVersion = cryptoVersion
        self.sessionToken = sessionToken
        self.conversationId = conversationId
        self.name = name
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.uuid(conversationId, "conversationId")
        try check.text(name, "name", characters: 1...Limits.MAX_LIVE_CONVERSATION_NAME_CHARS)
    }
}

/// Deletes one of the session identity's conversations.
public struct LiveConversationDelete: PrivilegedPayload, Equatable {
    public enum Keys: String, CodingKey, CaseIterable { case protocolVersion, cryptoVersion, sessionToken, conversationId }
    public typealias CodingKeys = Keys
    public static let frameType = ClientFrameType.liveConversationDelete
    public var protocolVersion: Int
    public var cryptoVersion: Int
    public var sessionToken: String
    public var conversationId: String

    public init(protocolVersion: Int = 1, cryptoVersion: Int = 1, sessionToken: String, conversationId: String) {
        self.protocolVersion = protocolVersion
        self.cryptoVersion = cryptoVersion
        self.sessionToken = sessionToken
        self.conversationId = conversationId
    }

    public func validate() throws(FieldViolation) {
        try Checker().uuid(conversationId, "conversationId")
    }
}

/// Lists the session identity's conversations.
public struct LiveConversationsList: PrivilegedPayload, Equatable {
    public enum Keys: String, CodingKey, CaseIterable { case protocolVersion, cryptoVersion, sessionToken }
    public typealias CodingKeys = Keys
    public static let frameType = ClientFrameType.liveConversationsList
    public var protocolVersion: Int
    public var cryptoVersion: Int
    public var sessionToken: String

    public init(protocolVersion: Int = 1, cryptoVersion: Int = 1, sessionToken: String) {
        self.protocolVersion = protocolVersion
        self.cryptoVersion = cryptoVersion
        self.sessionToken = sessionToken
    }

    public func validate() throws(FieldViolation) {}
}

/// One conversation: the answer to `live_conversation_create` and `live_conversation_rename`,
/// and an item of `live_conversations`.
public struct LiveConversation: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.liveConversation
    public var conversationId: String
    public var name: String
    /// ms since 1970.
    public var createdAt: Int64
    public var updatedAt: Int64

    public init(conversationId: String, name: String, createdAt: Int64, updatedAt: Int64) {
        self.conversationId = conversationId
        self.name = name
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}

/// The answer to `live_conversations_list`: every conversation of the identity, newest
/// first (at most `MAX_LIVE_CONVERSATIONS`).
public struct LiveConversations: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.liveConversations
    public var conversations: [LiveConversation]

    public init(conversations: [LiveConversation]) {
        self.conversations = conversations
    }
}

/// The answer to `live_conversation_delete`.
public struct LiveConversationDeleted: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.liveConversationDeleted
    public var conversationId: String

    public init(conversationId: String) {
        self.conversationId = conversationId
    }
}
