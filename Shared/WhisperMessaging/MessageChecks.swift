import Foundation
import WhisperShared

/// The checks a message passes before it is stored (docs/protocol.md section 5), for the
/// gateway's sends and the router's group copies, cheapest first: what the message shows,
/// then the sender (cached), the signature, then the recipient (cached). Membership,
/// attachment ownership and the store script's caps are the caller's.
public struct MessageChecks: Sendable {
    public let identities: IdentityCache

    public init(identities: IdentityCache) {
        self.identities = identities
    }

    /// Checks `message` as sent by `session` (the identity the socket acts for) and
    /// returns the payload the recipient will get (`message_received`, as stored).
    /// `groupId` marks a group copy, signed over the groupId instead of the recipient.
    /// Throws the refusal (`WhisperError`) for the client, or an infrastructure error.
    public func check(_ message: SendMessage, groupId: String? = nil, sentBy session: String) async throws -> [UInt8] {
        let now = Clock.millisecondsNow()
        try Self.checkAuthor(message.from, session: session)
        try Self.checkSize(message)
        try Self.checkTimestamp(message.timestamp, now: now)
        let received = MessageReceived(message.fields, groupId: groupId)
        let body = received.payloadJSON
        guard body.count <= Limits.MAX_STORED_MESSAGE_BYTES else {
            throw WhisperError(.invalidPayload, "the message is \(body.count) bytes with all its fields; at most \(Limits.MAX_STORED_MESSAGE_BYTES)")
        }
        try await verifySignature(from: message.from, sig: message.sig, over: message.fields.signedBytes(groupId: groupId))
        guard let recipient = try await identities.lookup(message.to) else {
            throw WhisperError(.notFound, "no such recipient")
        }
        guard !recipient.banned else { throw WhisperError(.forbidden, "the recipient is banned") }
        return body
    }

    // MARK: - The rules of every signed frame (messages and call signals)

    /// A frame acts for the identity of the socket it came on.
    public static func checkAuthor(_ from: String, session: String) throws {
        guard from == session else { throw WhisperError(.forbidden, "from must be the Whisper ID of this session") }
    }

    /// A signed timestamp is within `TIMESTAMP_SKEW_MS` of the server's clock.
    public static func checkTimestamp(_ timestamp: Int64, now: Int64) throws {
        guard Clock.isWithinSkew(timestamp, of: now) else {
            throw WhisperError(.invalidTimestamp, "timestamp is more than 10 minutes from the server time \(now)")
        }
    }

    /// The sender exists, is not banned, and `sig` verifies over `canonical` (docs/protocol.md section 11)
    /// with its signing key (cached).
    public func verifySignature(from sender: String, sig: String, over canonical: [UInt8]) async throws {
        guard let identity = try await identities.lookup(sender) else {
            throw WhisperError(.notRegistered, "the sending identity does not exist")
        }
        guard !identity.banned else { throw WhisperError(.userBanned, "this identity is banned") }
        guard let signature = Data(base64Encoded: sig), CanonicalSigning.verifyPrepared([UInt8](signature), over: canonical, publicKey: identity.signPublicKey) else {
            throw WhisperError(.authFailed, "sig does not verify with the sender's signing key")
        }
    }

    /// The inline ciphertext holds at most MAX_TEXT_BYTES of plaintext; media travel
    /// as attachments, each kind within its limit.
    static func checkSize(_ message: SendMessage) throws {
        let inline = Format.decodedLength(ofBase64: message.ciphertext)
        guard inline <= Limits.MAX_TEXT_BYTES + Limits.BOX_OVERHEAD_BYTES else {
            throw WhisperError(.invalidPayload, "ciphertext is \(inline) bytes; at most \(Limits.MAX_TEXT_BYTES + Limits.BOX_OVERHEAD_BYTES) inline")
        }
        let limit: Int? = switch message.msgType {
        case .image: Limits.MAX_IMAGE_BYTES
        case .voice: Limits.MAX_VOICE_BYTES
        case .file: Limits.MAX_FILE_BYTES
        case .text, .system: nil
        }
        if let limit {
            guard let attachment = message.attachment else {
                throw WhisperError(.invalidPayload, "\(message.msgType.rawValue) messages carry an attachment")
            }
            guard attachment.ciphertextSize <= Int64(limit) else {
                throw WhisperError(.invalidPayload, "attachment.ciphertextSize over the \(message.msgType.rawValue) limit of \(limit) bytes")
            }
        }
    }
}
