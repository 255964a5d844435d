import Crypto
import Foundation
import WhisperProtocol

/// The Whisperer's side of a live-text conversation: fed every frame (`handle(_:)`), it
/// lets known listeners in again and sends whole texts itself, and returns what the app
/// decides, such as a stranger's request to `admit` or `refuse`.
public actor LiveWhisperer {
    public enum Event: Sendable, Equatable {
        /// A listener arrived (`known`: let in before, and let in again already).
        case arrived(listenerId: String, known: Bool, name: String?)
        /// A listener asks to be let in: `admit` or `refuse`.
        case request(listenerId: String, name: String)
        case joined(listenerId: String, name: String)
        case left(listenerId: String, reason: LiveDropped.Reason)
        /// The conversation was deleted (by its owner, from this socket or another): the
        /// place is gone and packets are refused from now on.
        case deleted
    }

    /// The socket it whispers on (``moved(to:)`` changes it).
    public private(set) var connection: WhisperConnection
    public let conversationId: String
    public let name: String
    /// Let known listeners in again without asking (the rejoin sequence).
    public var admitsKnownListeners = true
    public private(set) var past: [String] = []
    public private(set) var live = ""
    public private(set) var keyId = 0
    private var key = LiveCrypto.newConversationKey()
    /// Listeners present in this session: their public key and, once known, name.
    private var publicKeys: [String: String] = [:]
    private var names: [String: String] = [:]
    /// Each listener device's profile: devices of one profile are one person, let go together.
    private var profiles: [String: String] = [:]
    private var admitted: Set<String> = []
    public private(set) var joined: Set<String> = []

    public init(connection: WhisperConnection, conversationId: String, name: String) {
        self.connection = connection
        self.conversationId = conversationId
        self.name = name
    }

    /// Takes the Whisperer's place and offers the conversation to listeners waiting there.
    public func start() async throws {
        if keyId == 0 { keyId = 1 }
        try await control(LiveWhisperOffer(sessionToken: try await connection.token(), .init(conversationId: conversationId, whispererName: name)))
    }

    /// Goes on whispering on another socket (the last one was lost): the Whisperer's
    /// place ended with the old socket, and listeners' places with theirs or with the
    /// Whisperer leaving, so it takes the place again; the listeners still there answer
    /// the offer and those let in before are let in again at once. The text and the key
    /// are kept: a listener that joins again gets the whole text.
    public func moved(to socket: WhisperConnection) async throws {
        connection = socket
        joined = []
        admitted = []
        publicKeys = [:]
        try await start()
    }

    /// Handles a frame of the connection's events; nil for frames of other things.
    public func handle(_ frame: ServerFrame) async throws -> Event? {
        if let offer = frame.payload(as: LiveListenerOffered.self), offer.conversationId == conversationId {
            publicKeys[offer.listenerId] = offer.publicKey
            profiles[offer.listenerId] = offer.profileId
            if offer.known, admitsKnownListeners, let known = offer.name {
                try await admit(offer.listenerId, name: known)
            } else {
                try await control(LiveWhisperOffer(
                    sessionToken: try await connection.token(), .init(conversationId: conversationId, whispererName: name, listenerId: offer.listenerId)
                ))
            }
            return .arrived(listenerId: offer.listenerId, known: offer.known, name: offer.name)
        }
        if let request = frame.payload(as: LiveListenerRequested.self), request.conversationId == conversationId {
            names[request.listenerId] = request.name
            return .request(listenerId: request.listenerId, name: request.name)
        }
        if let joining = frame.payload(as: LiveListenerJoined.self), joining.conversationId == conversationId {
            joined.insert(joining.listenerId)
            try await sendEverything(to: joining.listenerId)
            return .joined(listenerId: joining.listenerId, name: joining.name)
        }
        if let said = frame.payload(as: LiveFromListener.self), said.conversationId == conversationId, said.keyId == keyId {
            let packet = try? LiveCrypto.openPacket(said.packet, key: key, conversationId: conversationId, keyId: keyId, fromWhisperer: false)
            if packet?.offset == LiveControl.rereadRequest.rawValue { try await sendEverything(to: said.listenerId) }
            return nil
        }
        if let dropped = frame.payload(as: LiveDropped.self), dropped.conversationId == conversationId {
            if dropped.reason == .deleted {
                joined = []
                admitted = []
                publicKeys = [:]
                return .deleted
            }
            guard let listenerId = dropped.listenerId else { return nil }
            joined.remove(listenerId)
            admitted.remove(listenerId)
            publicKeys[listenerId] = nil
            return .left(listenerId: listenerId, reason: dropped.reason)
        }
        return nil
    }

    /// Lets a listener in (kept by the server, so it is recognised next time).
    public func admit(_ listenerId: String, name listenerName: String? = nil) async throws {
        guard let publicKey = publicKeys[listenerId] else { throw LiveCryptoError.noKey }
        let shown = listenerName ?? names[listenerId] ?? "Listener"
        names[listenerId] = shown
        try await control(LiveAuthorize(
            sessionToken: try await connection.token(), .init(conversationId: conversationId, listenerId: listenerId, listenerName: shown,
            keyId: keyId, sealedKey: try LiveCrypto.seal(key, to: publicKey, conversationId: conversationId, keyId: keyId))
        ))
        admitted.insert(listenerId)
    }

    /// Refuses a listener, or lets one go, with every device of its profile: the server
    /// forgets it and sends it nothing more, and the others get a new key it never saw.
    public func refuse(_ listenerId: String) async throws {
        try await control(LiveDeauthorize(sessionToken: try await connection.token(), .init(conversationId: conversationId, listenerId: listenerId)))
        let profile = profiles[listenerId]
        let gone = Set([listenerId] + (profile.map { profile in profiles.filter { $0.value == profile }.map(\.key) } ?? []))
        var wasAdmitted = false
        for device in gone {
            wasAdmitted = admitted.remove(device) != nil || wasAdmitted
            joined.remove(device)
            publicKeys[device] = nil
        }
        guard wasAdmitted else { return }
        keyId += 1
        key = LiveCrypto.newConversationKey()
        for other in admitted { try await admit(other) }
    }

    /// The live text is now `text` (each keystroke): the change goes out as one packet.
    public func type(_ text: String) async throws {
        let packet = LiveTextPacket.change(from: live, to: text)
        live = text
        try await send(packet)
    }

    /// Return: the live text becomes past text.
    public func newline() async throws {
        past.append(live)
        live = ""
        try await send(LiveTextPacket(.newline))
    }

    /// Clears past and live text, here and for every listener.
    public func clear() async throws {
        past = []
        live = ""
        try await send(LiveTextPacket(.clear))
    }

    /// Leaves the conversation; listeners are told (`live_dropped`).
    public func drop() async throws {
        try await control(LiveDropping(.init(conversationId: conversationId)))
        admitted = []
        joined = []
    }

    /// The whole text to one listener: its past (the most recent lines that fit one
    /// packet), then its live text.
    public func sendEverything(to listenerId: String) async throws {
        var lines: [String] = []
        var bytes = 0
        let room = Limits.MAX_LIVE_PACKET_BYTES / 4 * 3 - 64
        for line in past.reversed() {
            bytes += line.utf8.count + 1
            if bytes > room { break }
            lines.insert(line, at: 0)
        }
        try await send(LiveTextPacket(.pastText, lines.joined(separator: "\n")), to: listenerId)
        try await send(LiveTextPacket(.liveText, live), to: listenerId)
    }

    /// Sends one packet as it is (to every joined listener, or to one): for control
    /// packets of an app's own, or to replay a lost one.
    public func send(_ packet: LiveTextPacket, to listenerId: String? = nil) async throws {
        let sealed = try LiveCrypto.sealPacket(packet, key: key, conversationId: conversationId, keyId: keyId, fromWhisperer: true)
        try await connection.sendOnly(LivePacket(
            sessionToken: try await connection.token(), .init(conversationId: conversationId, keyId: keyId, packet: sealed, listenerId: listenerId)
        ))
    }

    private func control<P: ClientPayload>(_ payload: P) async throws {
        let answer = try await connection.request(payload)
        guard answer.payload(as: LiveAck.self) != nil else { throw WhisperClientError.unexpectedReply(answer.type.rawValue) }
    }
}

/// A listener's side of a live-text conversation, on a connection opened with a
/// `ListenerDevice`. Feed it every frame of the connection's `events`.
public actor LiveListener {
    public enum Event: Sendable, Equatable {
        /// The Whisperer offered the conversation; the listener asked to be let in.
        case offered(conversationName: String, whispererName: String)
        /// Let in: content follows.
        case admitted
        /// Refused before being let in, or let go after.
        case refused
        case removed
        /// The text changed.
        case text(LiveTranscript)
        /// The Whisperer left (`dropping`), lost its socket (`leave`), or the conversation
        /// was deleted (`deleted`: nothing more will come).
        case whispererLeft(LiveDropped.Reason)
    }

    /// The socket it listens on (``moved(to:)`` changes it).
    public private(set) var connection: WhisperConnection
    public let conversationId: String
    public let name: String
    public private(set) var transcript = LiveTranscript()
    public private(set) var listenerId: String?
    private let privateKey = P256.KeyAgreement.PrivateKey()
    private var keys: [Int: SymmetricKey] = [:]
    private var keyId = 0
    private var joined = false

    public init(connection: WhisperConnection, conversationId: String, name: String) {
        self.connection = connection
        self.conversationId = conversationId
        self.name = name
    }

    /// Announces this listener to the conversation (the listen offer); returns its listener ID.
    @discardableResult
    public func start() async throws -> String {
        let answer = try await connection.request(LiveListenOffer(
            .init(conversationId: conversationId, publicKey: privateKey.publicKey.x963Representation.base64EncodedString())
        ))
        guard let ack = answer.payload(as: LiveAck.self), let id = ack.listenerId else {
            throw WhisperClientError.unexpectedReply(answer.type.rawValue)
        }
        listenerId = id
        return id
    }

    /// Goes on listening on another socket (of the same listener device): the place
    /// ended with the old socket, so it offers again; a Whisperer that let this device
    /// in lets it in again at once, and sends the whole text when it joins.
    public func moved(to socket: WhisperConnection) async throws {
        connection = socket
        joined = false
        try await start()
    }

    public func handle(_ frame: ServerFrame) async throws -> Event? {
        if let offer = frame.payload(as: LiveOffered.self), offer.conversationId == conversationId {
            // A Whisperer that just arrived learns this listener's key from a listen offer
            // (and lets a known listener in at once); an answer to that offer is answered
            // with the request.
            if offer.broadcast {
                guard !joined else { return nil }
                try await start()
                return nil
            }
            _ = try await connection.request(LiveListenRequest(.init(conversationId: conversationId, name: name)))
            return .offered(conversationName: offer.conversationName, whispererName: offer.whispererName)
        }
        if let authorized = frame.payload(as: LiveAuthorized.self), authorized.conversationId == conversationId {
            keys[authorized.keyId] = try LiveCrypto.open(sealed: authorized.sealedKey, with: privateKey, conversationId: conversationId, keyId: authorized.keyId)
            keyId = max(keyId, authorized.keyId)
            guard !joined else { return nil }
            joined = true
            _ = try await connection.request(LiveJoining(.init(conversationId: conversationId)))
            return .admitted
        }
        if let gone = frame.payload(as: LiveDeauthorized.self), gone.conversationId == conversationId {
            keys = [:]
            defer { joined = false }
            return joined ? .removed : .refused
        }
        if let content = frame.payload(as: LiveContent.self), content.conversationId == conversationId {
            guard let key = keys[content.keyId],
                  let packet = try? LiveCrypto.openPacket(content.packet, key: key, conversationId: conversationId, keyId: content.keyId, fromWhisperer: true)
            else { return nil }
            if transcript.apply(packet) { try await askForEverything() }
            return .text(transcript)
        }
        if let dropped = frame.payload(as: LiveDropped.self), dropped.conversationId == conversationId, dropped.listenerId == nil {
            joined = false
            if dropped.reason == .deleted { keys = [:] }
            return .whispererLeft(dropped.reason)
        }
        return nil
    }

    /// Asks the Whisperer for the whole text (after a gap, `LiveTranscript` asks by itself).
    public func askForEverything() async throws {
        guard let key = keys[keyId] else { return }
        let sealed = try LiveCrypto.sealPacket(LiveTextPacket(.rereadRequest), key: key, conversationId: conversationId, keyId: keyId, fromWhisperer: false)
        try await connection.sendOnly(LiveListenerPacket(.init(conversationId: conversationId, keyId: keyId, packet: sealed)))
    }

    public func drop() async throws {
        _ = try await connection.request(LiveDropping(.init(conversationId: conversationId)))
        joined = false
    }
}
