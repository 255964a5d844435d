import AsyncHTTPClient
import Foundation
import WhisperProtocol

/// Push-to-talk channels and their floor (docs/protocol.md section 14). Media is the
/// app's: these calls say who may talk; `PTTFloor.isValidGrant(floorKeys:at:)` checks a
/// grant against the server's floor keys (`fetchFloorKeys`).
extension WhisperConnection {
    public func createChannel(name: String, isPublic: Bool = false) async throws -> PTTChannel {
        try await pttAnswer(PTTChannelCreate(sessionToken: try token(), .init(name: name, isPublic: isPublic)))
    }

    public func joinChannel(code: String) async throws -> PTTChannel {
        try await pttAnswer(PTTChannelJoin(sessionToken: try token(), .init(joinCode: code.uppercased())))
    }

    public func joinChannel(id: String) async throws -> PTTChannel {
        try await pttAnswer(PTTChannelJoin(sessionToken: try token(), .init(channelId: id)))
    }

    public func leaveChannel(_ channelId: String) async throws {
        let _: PTTMembership = try await pttAnswer(PTTChannelLeave(sessionToken: try token(), .init(channelId: channelId)))
    }

    /// Removes a member (the owner only); every member is told (`ptt_membership`, `removed`).
    public func removeMember(_ whisperId: String, from channelId: String) async throws {
        let _: PTTMembership = try await pttAnswer(PTTChannelRemove(sessionToken: try token(), .init(channelId: channelId, whisperId: whisperId)))
    }

    /// Draws a new join code (the owner only); the old one joins nobody from then on.
    public func rotateJoinCode(_ channelId: String) async throws -> PTTChannel {
        try await pttAnswer(PTTChannelRotateCode(sessionToken: try token(), .init(channelId: channelId)))
    }

    /// Deletes a channel (its owner only); every member is told (`ptt_membership`, `deleted`).
    public func deleteChannel(_ channelId: String) async throws {
        let _: PTTMembership = try await pttAnswer(PTTChannelDelete(sessionToken: try token(), .init(channelId: channelId)))
    }

    /// The channels this identity is a member of, newest first.
    public func channels() async throws -> [PTTChannel] {
        let list: PTTChannels = try await pttAnswer(PTTChannelsList(sessionToken: try token()))
        return list.channels
    }

    /// Asks for the floor: `granted` (with the signed grant), `queued` (with `queue`: the
    /// floor comes as a `ptt_floor` event when it is this identity's turn) or `refused`.
    public func requestTalk(_ channelId: String, queue: Bool = false) async throws -> PTTFloor {
        try await pttAnswer(PTTTalkRequest(sessionToken: try token(), .init(channelId: channelId, queue: queue)))
    }

    /// Gives up the floor, or a place waiting for it.
    public func releaseTalk(_ channelId: String) async throws -> PTTFloor {
        try await pttAnswer(PTTTalkRelease(sessionToken: try token(), .init(channelId: channelId)))
    }

    /// Keeps a public channel (this identity's) announced in `cell` (a geohash of
    /// `Geohash.nearbyPrecision` characters: `Geohash.encode(latitude:longitude:)`); call it
    /// every 10 s while it should be found. Nil stops.
    @discardableResult
    public func announceChannel(_ channelId: String, in cell: String?) async throws -> PTTAnnounced {
        try await pttAnswer(PTTAnnounce(sessionToken: try token(), .init(channelId: channelId, cell: cell)))
    }

    /// Public channels announced in `cell` and the eight cells around it.
    public func nearbyChannels(in cell: String) async throws -> [PTTNearbyChannels.Channel] {
        let answer: PTTNearbyChannels = try await pttAnswer(PTTNearby(sessionToken: try token(), .init(cell: cell)))
        return answer.channels
    }

    /// The keys floor grants are signed with (`GET /ptt/floor-key` on the gateway). Keep
    /// them, and fetch them again when a grant names a key ID they do not list.
    public static func fetchFloorKeys(websocketURL: String, http: HTTPClient = .shared) async throws -> PTTFloorKeys {
        let response = try await http.execute(HTTPClientRequest(url: ListenerDevice.origin(ofWebSocket: websocketURL) + "/ptt/floor-key"), timeout: .seconds(10))
        let body = try await response.body.collect(upTo: 16_384)
        guard response.status == .ok, let keys = try? JSONDecoder().decode(PTTFloorKeys.self, from: Data(body.readableBytesView)),
              !keys.keys.isEmpty, keys.keys.allSatisfy({ keys.publicKey($0.keyId) != nil })
        else { throw WhisperAPIError.unreadableResponse("no floor keys at \(websocketURL)") }
        return keys
    }

    private func pttAnswer<Answer: ServerPayload, Request: ClientPayload>(_ payload: Request) async throws -> Answer {
        let frame = try await request(payload)
        guard let answer = frame.payload(as: Answer.self) else { throw WhisperClientError.unexpectedReply(frame.type.rawValue) }
        return answer
    }
}

/// Push-to-talk media signaling: a WebRTC offer, answer or ICE candidate boxed to one
/// member and signed (docs/protocol.md section 14, "Media signaling").
public enum PTTSignaling {
    public static func make(
        _ kind: PTTSignalFields.Kind, _ blob: [UInt8], channelId: String, from sender: (whisperId: String, keys: WhisperKeys), to peer: PeerKeys,
        sessionToken: String, signalId: String = RandomID.uuid(), timestamp: Int64 = Clock.millisecondsNow()
    ) -> PTTSignal {
        let nonce = SecureBytes.random(X25519Box.nonceBytes)
        let box = X25519Box.seal(blob, nonce: nonce, recipientPublicKey: peer.encPublicKey, senderPrivateKey: sender.keys.encPrivateKey)
        let nonceText = Data(nonce).base64EncodedString(), ciphertext = Data(box).base64EncodedString()
        let signed = PTTSignalFields.signedBytes(
            channelId: channelId, signalId: signalId, from: sender.whisperId, to: peer.whisperId, kind: kind, timestamp: timestamp, nonce: nonceText,
            ciphertext: ciphertext
        )
        return PTTSignal(
            sessionToken: sessionToken, .init(channelId: channelId, signalId: signalId, from: sender.whisperId, to: peer.whisperId, kind: kind,
            timestamp: timestamp, nonce: nonceText, ciphertext: ciphertext,
            sig: Data(CanonicalSigning.sign(signed, with: sender.keys.signing)).base64EncodedString())
        )
    }

    /// Checks the sender's signature on a received signal and opens its blob.
    public static func open(
        _ signal: PTTSignalReceived, by recipient: (whisperId: String, keys: WhisperKeys), peer: PeerKeys
    ) throws(MessageCryptoError) -> [UInt8] {
        guard signal.to == recipient.whisperId, signal.from == peer.whisperId else { throw .notForMe }
        guard let signature = Data(base64Encoded: signal.sig), CanonicalSigning.verify([UInt8](signature), over: signal.signedBytes, publicKey: peer.signPublicKey) else {
            throw .badSignature
        }
        guard let nonce = Data(base64Encoded: signal.nonce), let box = Data(base64Encoded: signal.ciphertext),
              let blob = X25519Box.open([UInt8](box), nonce: [UInt8](nonce), senderPublicKey: peer.encPublicKey, recipientPrivateKey: recipient.keys.encPrivateKey)
        else { throw .cannotDecrypt }
        return blob
    }
}
