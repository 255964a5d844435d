import Foundation
import WhisperProtocol

/// Call signaling (docs/protocol.md section 7): each frame carries its SDP or
/// ICE candidate boxed to the peer and is signed over the canonical bytes with its own
/// frame type and the `callId` in place of a messageId.
public enum CallCrypto {
    /// A signed signaling frame of kind `Marker` (`CallInitiate`, `CallAnswer`,
    /// `CallIceCandidate`, `CallEnd`) carrying `blob` (SDP, candidate; empty for an end)
    /// boxed to `peer`.
    public static func make<Marker: CallSignalFrame>(
        _ kind: CallSignal<Marker>.Type, _ blob: [UInt8], callId: String, from sender: (whisperId: String, keys: WhisperKeys),
        to peer: PeerKeys, sessionToken: String, timestamp: Int64 = Clock.millisecondsNow(), media: CallMedia? = nil,
        reason: CallEndReason? = nil
    ) -> CallSignal<Marker> {
        let nonce = SecureBytes.random(X25519Box.nonceBytes)
        let ciphertext = X25519Box.seal(blob, nonce: nonce, recipientPublicKey: peer.encPublicKey, senderPrivateKey: sender.keys.encPrivateKey)
        let nonceText = Data(nonce).base64EncodedString()
        let ciphertextText = Data(ciphertext).base64EncodedString()
        let signed = CanonicalSigning.bytes(
            messageType: Marker.frameType.rawValue, messageId: callId, from: sender.whisperId, toOrGroupId: peer.whisperId,
            timestamp: timestamp, nonce: nonceText, ciphertext: ciphertextText
        )
        return CallSignal<Marker>(
            sessionToken: sessionToken, .init(callId: callId, from: sender.whisperId, to: peer.whisperId, timestamp: timestamp,
            nonce: nonceText, ciphertext: ciphertextText, sig: Data(CanonicalSigning.sign(signed, with: sender.keys.signing)).base64EncodedString(),
            media: media, reason: reason)
        )
    }

    /// Verifies the peer's signature on a relayed frame (`call_incoming`, `call_answered`,
    /// `call_remote_candidate`), then opens its blob. `signedAs` is the frame type the
    /// peer sent (`call_initiate` for `call_incoming`, and so on).
    public static func open<Marker: CallDeliveryFrame>(
        _ frame: CallSignalDelivery<Marker>, signedAs type: ClientFrameType, by recipient: (whisperId: String, keys: WhisperKeys), peer: PeerKeys
    ) throws(MessageCryptoError) -> [UInt8] {
        try open(
            type: type, callId: frame.callId, from: frame.from, to: frame.to, timestamp: frame.timestamp, nonce: frame.nonce,
            ciphertext: frame.ciphertext, sig: frame.sig, recipient: recipient, peer: peer
        )
    }

    /// The same for a peer's `call_ended` (`origin` `peer`); a server-made one carries no
    /// signature and nothing to open (`MessageCryptoError.badSignature`).
    public static func open(
        _ ended: CallEnded, by recipient: (whisperId: String, keys: WhisperKeys), peer: PeerKeys
    ) throws(MessageCryptoError) -> [UInt8] {
        guard ended.origin == .peer, let nonce = ended.nonce, let ciphertext = ended.ciphertext, let sig = ended.sig else {
            throw .badSignature
        }
        return try open(
            type: .callEnd, callId: ended.callId, from: ended.from, to: ended.to, timestamp: ended.timestamp, nonce: nonce,
            ciphertext: ciphertext, sig: sig, recipient: recipient, peer: peer
        )
    }

    private static func open(
        type: ClientFrameType, callId: String, from: String, to: String, timestamp: Int64, nonce: String, ciphertext: String, sig: String,
        recipient: (whisperId: String, keys: WhisperKeys), peer: PeerKeys
    ) throws(MessageCryptoError) -> [UInt8] {
        guard to == recipient.whisperId, from == peer.whisperId else { throw .notForMe }
        let signed = CanonicalSigning.bytes(
            messageType: type.rawValue, messageId: callId, from: from, toOrGroupId: to, timestamp: timestamp, nonce: nonce, ciphertext: ciphertext
        )
        guard let signature = Data(base64Encoded: sig), CanonicalSigning.verify([UInt8](signature), over: signed, publicKey: peer.signPublicKey) else {
            throw .badSignature
        }
        guard let nonceBytes = Data(base64Encoded: nonce), let box = Data(base64Encoded: ciphertext),
              let blob = X25519Box.open([UInt8](box), nonce: [UInt8](nonceBytes), senderPublicKey: peer.encPublicKey, recipientPrivateKey: recipient.keys.encPrivateKey) else {
            throw .cannotDecrypt
        }
        return blob
    }
}

/// How a `call_initiate` was answered.
public enum CallStart: Sendable, Equatable {
    /// The callee's device has the call, or a push is waking it.
    case ringing(CallRinging)
    /// The call ended at once (`busy`).
    case ended(CallEnded)
}

extension WhisperConnection {
    /// Starts a call (`CallCrypto.make(CallInitiate.self, ...)`); returns once the callee
    /// rings, or the server ended the call at once. Everything after arrives on `events`:
    /// `call_answered`, `call_remote_candidate`, `call_ended`.
    public func startCall(_ initiate: CallInitiate, timeout: Duration = .seconds(10)) async throws -> CallStart {
        let frame = try await request(initiate, timeout: timeout)
        if let ringing = frame.payload(as: CallRinging.self) { return .ringing(ringing) }
        if let ended = frame.payload(as: CallEnded.self) { return .ended(ended) }
        throw WhisperClientError.unexpectedReply(frame.type.rawValue)
    }

    /// Sends `call_answer`, `call_ice_candidate` or `call_end`. Nothing answers them; a
    /// refusal arrives on `events` as an `error` frame.
    public func signal<Marker: CallSignalFrame>(_ signal: CallSignal<Marker>) async throws {
        try await sendOnly(signal)
    }

    /// Time-limited TURN credentials (coturn's REST scheme) for the next call.
    public func turnCredentials() async throws -> TurnCredentials {
        let frame = try await request(GetTurnCredentials(sessionToken: try token()))
        guard let credentials = frame.payload(as: TurnCredentials.self) else { throw WhisperClientError.unexpectedReply(frame.type.rawValue) }
        return credentials
    }
}
