import Foundation
import WhisperProtocol

/// A peer's public keys, as `GET /users/{id}/keys` returns them.
public struct PeerKeys: Codable, Sendable, Equatable {
    public var whisperId: String
    public var encPublicKey: [UInt8]
    public var signPublicKey: [UInt8]

    public init(whisperId: String, encPublicKey: [UInt8], signPublicKey: [UInt8]) {
        self.whisperId = whisperId
        self.encPublicKey = encPublicKey
        self.signPublicKey = signPublicKey
    }
}

/// The `crypto_box` key between one's own keys and one peer's, worked out once per
/// conversation instead of once per message (an X25519 multiplication each way).
public struct ConversationKey: Sendable {
    let bytes: [UInt8]

    /// Nil for a peer key that cannot be used (an all-zero shared secret).
    public init?(mine: WhisperKeys, peer: PeerKeys) {
        guard let bytes = X25519Box.sharedKey(publicKey: peer.encPublicKey, privateKey: mine.encPrivateKey) else { return nil }
        self.bytes = bytes
    }
}

/// Why a message, a call frame, an attachment or a backup did not open.
public enum MessageCryptoError: Error, Equatable, Sendable {
    /// The signature does not verify with the sender's signing key: drop it.
    case badSignature
    /// It does not decrypt (or decode) with these keys.
    case cannotDecrypt
    /// It is addressed to someone else, or not from the peer whose keys were given.
    case notForMe
    /// A caller-chosen nonce of the wrong length (a secretbox nonce is 24 bytes).
    case invalidNonce
}

/// Encrypting, signing, verifying and decrypting 1:1 messages (docs/protocol.md sections 5 and 11).
public enum MessageCrypto {
    /// A signed `send_message` carrying `plaintext` boxed to the recipient.
    /// `directoryHead`: the key directory head this client holds (``DirectoryView/head``),
    /// for the recipient to compare with its own (``WhisperAPI/compareHead(_:)``); the
    /// signature covers it.
    public static func makeMessage(
        _ plaintext: [UInt8], from sender: (whisperId: String, keys: WhisperKeys), to recipient: PeerKeys,
        sessionToken: String, msgType: MessageType = .text, messageId: String = RandomID.uuid(),
        timestamp: Int64 = Clock.millisecondsNow(), replyTo: String? = nil, attachment: AttachmentPointer? = nil,
        directoryHead: DirectoryHead? = nil, key: ConversationKey? = nil
    ) -> SendMessage {
        let nonce = SecureBytes.random(X25519Box.nonceBytes)
        let ciphertext = if let key {
            X25519Box.seal(plaintext, nonce: nonce, sharedKey: key.bytes)
        } else {
            X25519Box.seal(plaintext, nonce: nonce, recipientPublicKey: recipient.encPublicKey, senderPrivateKey: sender.keys.encPrivateKey)
        }
        var message = SendMessageFields(
            messageId: messageId, from: sender.whisperId, to: recipient.whisperId, msgType: msgType, timestamp: timestamp,
            nonce: Data(nonce).base64EncodedString(), ciphertext: Data(ciphertext).base64EncodedString(), sig: "",
            replyTo: replyTo, attachment: attachment, directoryHead: directoryHead
        )
        message.sig = Data(CanonicalSigning.sign(message.signedBytes(), with: sender.keys.signing)).base64EncodedString()
        return SendMessage(sessionToken: sessionToken, message)
    }

    /// One group message as its copies (docs/protocol.md section 6, pairwise fan-out): for each member, the
    /// plaintext boxed to that member and signed over the groupId (docs/protocol.md
    /// section 11), all under one `messageId`. Send each with `group_send_message`.
    public static func makeGroupCopies(
        _ plaintext: [UInt8], groupId: String, from sender: (whisperId: String, keys: WhisperKeys), to members: [PeerKeys],
        sessionToken: String, msgType: MessageType = .text, messageId: String = RandomID.uuid(),
        timestamp: Int64 = Clock.millisecondsNow(), replyTo: String? = nil, attachment: AttachmentPointer? = nil,
        directoryHead: DirectoryHead? = nil
    ) -> [GroupSendMessage] {
        members.filter { $0.whisperId != sender.whisperId }.map { member in
            let nonce = SecureBytes.random(X25519Box.nonceBytes)
            let ciphertext = X25519Box.seal(plaintext, nonce: nonce, recipientPublicKey: member.encPublicKey, senderPrivateKey: sender.keys.encPrivateKey)
            var message = SendMessageFields(
                messageId: messageId, from: sender.whisperId, to: member.whisperId, msgType: msgType, timestamp: timestamp,
                nonce: Data(nonce).base64EncodedString(), ciphertext: Data(ciphertext).base64EncodedString(), sig: "",
                replyTo: replyTo, attachment: attachment, directoryHead: directoryHead
            )
            message.sig = Data(CanonicalSigning.sign(message.signedBytes(groupId: groupId), with: sender.keys.signing)).base64EncodedString()
            return GroupSendMessage(sessionToken: sessionToken, .init(groupId: groupId, message: message))
        }
    }

    /// Verifies the sender's signature, then decrypts. Spec 4.2: verify, decrypt, store,
    /// and only then send the delivery receipt.
    public static func open(
        _ message: MessageReceived, by recipient: (whisperId: String, keys: WhisperKeys), sender: PeerKeys, key: ConversationKey? = nil
    ) throws(MessageCryptoError) -> [UInt8] {
        guard message.to == recipient.whisperId, message.from == sender.whisperId else { throw .notForMe }
        guard let sig = Data(base64Encoded: message.sig),
              CanonicalSigning.verify([UInt8](sig), over: message.message.signedBytes(groupId: message.groupId), publicKey: sender.signPublicKey)
        else { throw .badSignature }
        guard let nonce = Data(base64Encoded: message.nonce), let ciphertext = Data(base64Encoded: message.ciphertext) else {
            throw .cannotDecrypt
        }
        let plaintext = if let key {
            X25519Box.open([UInt8](ciphertext), nonce: [UInt8](nonce), sharedKey: key.bytes)
        } else {
            X25519Box.open([UInt8](ciphertext), nonce: [UInt8](nonce), senderPublicKey: sender.encPublicKey, recipientPrivateKey: recipient.keys.encPrivateKey)
        }
        guard let plaintext else { throw .cannotDecrypt }
        return plaintext
    }
}

/// Remembers the last `capacity` message IDs per conversation, so a message that arrives
/// twice (a resend, a redelivery after a server crash) is processed once (docs/sdk.md).
/// At most `total` IDs in all: past it the conversations least recently heard from are
/// forgotten whole, so messages from ever new senders (or a hostile server's invented
/// ones) cannot grow it without bound.
public struct MessageDeduplicator: Sendable {
    public let capacity: Int
    public let total: Int
    private var seen: [String: Set<String>] = [:]
    private var order: [String: [String]] = [:]
    private var head: [String: Int] = [:]
    /// IDs remembered, every conversation together.
    public private(set) var count = 0
    /// Each conversation's last new ID, by a counter, and the sightings in that order
    /// (older entries of a conversation seen since are skipped, and dropped in a while).
    private var lastHeard: [String: UInt64] = [:]
    private var heard: [(conversation: String, at: UInt64)] = []
    private var heardStart = 0
    private var clock: UInt64 = 0

    public init(capacity: Int = 10_000, total: Int = 100_000) {
        self.capacity = capacity
        self.total = max(total, capacity)
    }

    /// Conversations remembered.
    public var conversations: Int { order.count }

    /// Whether a messageId was seen in a conversation (without remembering it).
    public func contains(_ messageId: String, in conversation: String) -> Bool {
        seen[conversation]?.contains(messageId.lowercased()) ?? false
    }

    /// True the first time a messageId is seen in a conversation (keyed by the peer or group).
    public mutating func firstSighting(_ messageId: String, in conversation: String) -> Bool {
        let id = messageId.lowercased()
        if seen[conversation, default: []].contains(id) { return false }
        seen[conversation, default: []].insert(id)
        var ring = order[conversation, default: []]
        if ring.count < capacity {
            ring.append(id)
            count += 1
        } else {
            let slot = head[conversation, default: 0]
            seen[conversation]?.remove(ring[slot])
            ring[slot] = id
            head[conversation] = (slot + 1) % capacity
        }
        order[conversation] = ring
        heardFrom(conversation)
        return true
    }

    /// Every remembered messageId with its conversation, each conversation's oldest first.
    public func remembered() -> [DeliveredMessage] {
        order.sorted { $0.key < $1.key }.flatMap { conversation, ring in
            let start = ring.count < capacity ? 0 : head[conversation, default: 0]
            return (ring[start...] + ring[..<start]).map { DeliveredMessage(conversation: conversation, messageId: $0) }
        }
    }

    /// Marks `conversation` the most recently heard from, then forgets the least recently
    /// heard from ones while more than `total` IDs are held.
    private mutating func heardFrom(_ conversation: String) {
        clock += 1
        lastHeard[conversation] = clock
        heard.append((conversation, clock))
        while count > total, heardStart < heard.count {
            let (oldest, at) = heard[heardStart]
            heardStart += 1
            guard lastHeard[oldest] == at, oldest != conversation else { continue }
            count -= order[oldest]?.count ?? 0
            seen[oldest] = nil
            order[oldest] = nil
            head[oldest] = nil
            lastHeard[oldest] = nil
        }
        // The list of sightings keeps about one entry per conversation.
        if heard.count - heardStart > 2 * lastHeard.count + 64 {
            heard = heard[heardStart...].filter { lastHeard[$0.conversation] == $0.at }
            heardStart = 0
        }
    }
}

/// A message the app acknowledged as delivered (it stored it): the conversation (the
/// peer, or the group) and the messageId.
public struct DeliveredMessage: Codable, Sendable, Equatable {
    public var conversation: String
    public var messageId: String

    public init(conversation: String, messageId: String) {
        self.conversation = conversation
        self.messageId = messageId.lowercased()
    }
}

/// Where a session keeps the messages the app acknowledged, so that a copy coming again
/// (after the server's 72 h duplicate window, or a restart) is acknowledged, not shown
/// twice: the newest 10,000 per conversation, enough since an outbox sends in order.
public protocol DeliveredStore: Sendable {
    /// Every message recorded, each conversation's oldest first.
    func load() async throws -> [DeliveredMessage]
    /// Records one more.
    func append(_ message: DeliveredMessage) async throws
    /// Replaces the record with `messages` (what the session still remembers), once the
    /// record has grown past twice that.
    func replace(with messages: [DeliveredMessage]) async throws
}

/// A record that lives as long as the process (tests, tools): a restarted app shows a
/// copy of a message again.
public actor MemoryDeliveredStore: DeliveredStore {
    private var messages: [DeliveredMessage] = []
    public init() {}
    public func load() async throws -> [DeliveredMessage] { messages }
    public func append(_ message: DeliveredMessage) async throws { messages.append(message) }
    public func replace(with messages: [DeliveredMessage]) async throws { self.messages = messages }
}

/// The record as a file of JSON lines, one message each: appended to as the app
/// acknowledges, replaced atomically when the session compacts it. A line cut short by a
/// crash is skipped when the file is read.
public actor FileDeliveredStore: DeliveredStore {
    public let url: URL
    public init(url: URL) { self.url = url }

    public func load() async throws -> [DeliveredMessage] {
        guard FileManager.default.fileExists(atPath: url.path) else { return [] }
        let decoder = JSONDecoder()
        return try Data(contentsOf: url).split(separator: UInt8(ascii: "\n")).compactMap { try? decoder.decode(DeliveredMessage.self, from: Data($0)) }
    }

    public func append(_ message: DeliveredMessage) async throws {
        try (JSONEncoder().encode(message) + Data("\n".utf8)).appendLines(to: url)
    }

    public func replace(with messages: [DeliveredMessage]) async throws {
        let encoder = JSONEncoder()
        var data = Data()
        for message in messages { data += try encoder.encode(message) + Data("\n".utf8) }
        try data.write(to: url, options: .atomic)
    }
}
