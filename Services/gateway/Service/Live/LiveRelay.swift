import Logging
import PostgresNIO
import WhisperShared

/// Live text (docs/protocol.md section 13): the control sequence, and content relayed over
/// pub/sub to the gateways of the sockets that may have it, kept nowhere. Places are in
/// Redis (`LiveKeeper`) and, for this gateway, `LiveRegistry`; who was let in is Postgres's
/// `live_listeners`. A join writes its place before it reads the row, so a join and a
/// deauthorization that cross end with the listener out (docs/architecture.md, "Live text").
struct LiveRelay: Sendable {
    struct Limits: Sendable {
        var maxListeners: Int
        var maxSockets: Int
        /// The rules of live text's buckets (`Limit.liveOffersPerDevice`,
        /// `.livePacketsPerWhisperer`, `.liveFramesPerListener`).
        var rules: LimitRules
    }

    /// A place as Redis has it.
    struct Entry: Sendable, Equatable {
        var gateway: String
        var connId: String
        var isWhisperer: Bool
        /// The Whisperer's Whisper ID, or the listener's device ID.
        var id: String
        var joined: Bool
    }

    let redis: RedisClient
    let postgres: PostgresClient
    /// Which devices are one listener (`live_listeners` names profiles).
    let profiles: LiveProfiles
    let registry: LiveRegistry
    /// This gateway's sockets, written straight from here (`route`).
    let connections: ConnectionRegistry
    let limiter: RateLimiter
    let limits: Limits
    let instanceID: String
    let logger: Logger
    /// How long a place lasts in Redis without its gateway renewing it.
    static let placeTTL: Duration = .seconds(120)

    // MARK: - Whisperer

    func whisperOffer(_ offer: LiveWhisperOffer, whisperId: String, on connection: ClientConnection) async throws -> LiveAck {
        let name = try await ownedName(offer.conversationId, owner: whisperId, whisperingAs: offer.whispererName)
        guard registry.take(connection.id, offer.conversationId, role: .whisperer(whisperId: whisperId), rule: limits.rules[.livePacketsPerWhisperer]) else {
            throw WhisperError(.forbidden, "this socket is in \(LiveRegistry.maxPlacesPerSocket) conversations already")
        }
        try await record(connection.id, offer.conversationId, isWhisperer: true, id: whisperId, joined: false)
        let targets = try await entries(offer.conversationId).filter { !$0.isWhisperer && (offer.listenerId == nil || $0.id == offer.listenerId) }
        try await route(
            LiveOffered(
                conversationId: offer.conversationId, conversationName: name, whispererId: whisperId, whispererName: offer.whispererName,
                broadcast: offer.listenerId == nil
            ),
            to: targets, conversationId: offer.conversationId, mode: .control
        )
        return LiveAck(conversationId: offer.conversationId)
    }

    func authorize(_ request: LiveAuthorize, whisperId: String, on connection: ClientConnection) async throws -> LiveAck {
        try requireWhisperer(request.conversationId, whisperId, on: connection)
        let rows = try await postgres.query(
            """
            INSERT INTO live_listeners (conversation_id, listener_id, name)
            SELECT \(request.conversationId), p.id, \(request.listenerName)
            FROM (SELECT live_profile_of(\(request.listenerId)) AS id) p
            WHERE EXISTS (SELECT 1 FROM live_conversations WHERE conversation_id = \(request.conversationId) AND owner_id = \(whisperId))
              AND (EXISTS (SELECT 1 FROM live_listeners WHERE conversation_id = \(request.conversationId) AND listener_id = p.id)
                   OR (SELECT count(*) FROM live_listeners WHERE conversation_id = \(request.conversationId)) < \(limits.maxListeners))
            ON CONFLICT (conversation_id, listener_id) DO UPDATE SET name = EXCLUDED.name
            RETURNING listener_id
            """,
            logger: logger
        )
        var stored = false
        for try await _ in rows.decode(String.self) { stored = true }
        guard stored else {
            // Deleted meanwhile (NOT_FOUND), or full.
            _ = try await ownedName(request.conversationId, owner: whisperId)
            throw WhisperError(.forbidden, "a conversation keeps at most \(limits.maxListeners) listeners; let one go first")
        }
        let targets = try await entries(request.conversationId).filter { !$0.isWhisperer && $0.id == request.listenerId }
        try await route(
            LiveAuthorized(conversationId: request.conversationId, keyId: request.keyId, sealedKey: request.sealedKey),
            to: targets, conversationId: request.conversationId, mode: .control
        )
        return LiveAck(conversationId: request.conversationId)
    }

    /// Refuses or lets go a listener, with or without the Whisperer's place: the row of
    /// its device's profile goes first, then the places of every device of that profile,
    /// everywhere (told `live_deauthorized` as they go).
    func deauthorize(_ request: LiveDeauthorize, whisperId: String) async throws -> LiveAck {
        _ = try await ownedName(request.conversationId, owner: whisperId)
        let person = try await profiles.people(request.listenerId)
        try await postgres.query(
            "DELETE FROM live_listeners WHERE conversation_id = \(request.conversationId) AND listener_id = \(person.profileId)",
            logger: logger
        )
        let targets = try await entries(request.conversationId).filter { !$0.isWhisperer && person.devices.contains($0.id) }
        try await forget(targets, conversationId: request.conversationId)
        try await route(LiveDeauthorized(conversationId: request.conversationId), to: targets, conversationId: request.conversationId, mode: .detach)
        return LiveAck(conversationId: request.conversationId)
    }

    /// A content packet, to every joined listener or to one. Nothing answers it unless
    /// it is refused.
    func packet(_ packet: LivePacket, whisperId: String, on connection: ClientConnection) async throws {
        try requireWhisperer(packet.conversationId, whisperId, on: connection)
        guard registry.spend(connection.id, packet.conversationId) else {
            throw Limit.livePacketsPerWhisperer.refused(retryAfterMs: nil)
        }
        let targets = try await entries(packet.conversationId).filter {
            !$0.isWhisperer && $0.joined && (packet.listenerId == nil || $0.id == packet.listenerId)
        }
        try await route(
            LiveContent(conversationId: packet.conversationId, keyId: packet.keyId, packet: packet.packet),
            to: targets, conversationId: packet.conversationId, mode: .content
        )
    }

    // MARK: - Listener

    func listenOffer(_ offer: LiveListenOffer, device: String, on connection: ClientConnection) async throws -> LiveAck {
        // Known when the device's profile was let in, under the profile's own name if it
        // has one, else the name it was let in under.
        let rows = try await postgres.query(
            """
            SELECT p.id, (SELECT COALESCE((SELECT name FROM live_profiles WHERE profile_id = p.id), l.name)
                          FROM live_listeners l WHERE l.conversation_id = c.conversation_id AND l.listener_id = p.id)
            FROM live_conversations c,
                 (SELECT live_profile_of(\(device)) AS id) p
            WHERE c.conversation_id = \(offer.conversationId)
            """,
            logger: logger
        )
        var found = false
        var knownName: String?
        var profileId = device
        for try await (id, name) in rows.decode((String, String?).self) {
            found = true
            profileId = id
            knownName = name
        }
        guard found else { throw WhisperError(.notFound, "no such conversation") }
        // Offers are charged to the device (and, at the route, to the address), not to
        // the conversation: a stranger with the link cannot spend a real listener's.
        try await limiter.charge(.liveOffersPerDevice, key: device, rules: limits.rules)
        let present = try await entries(offer.conversationId)
        let mine = present.contains { $0.gateway == instanceID && $0.connId == connection.id }
        // The cap counts joined listeners, so devices that only offered cannot take the
        // places of the listeners the Whisperer lets in; devices it never let in may wait
        // in as many more places, no more.
        let joined = present.filter { !$0.isWhisperer && $0.joined }.count
        let waiting = present.filter { !$0.isWhisperer && !$0.joined }.count
        guard mine || (knownName != nil ? joined : waiting) < limits.maxSockets else {
            throw WhisperError(.forbidden, "this conversation has as many listeners as it takes")
        }
        guard registry.take(connection.id, offer.conversationId, role: .listener(deviceId: device), rule: limits.rules[.liveFramesPerListener]) else {
            throw WhisperError(.forbidden, "this socket is in \(LiveRegistry.maxPlacesPerSocket) conversations already")
        }
        try await record(connection.id, offer.conversationId, isWhisperer: false, id: device, joined: false)
        try await route(
            LiveListenerOffered(
                conversationId: offer.conversationId, listenerId: device, profileId: profileId, publicKey: offer.publicKey,
                known: knownName != nil, name: knownName
            ),
            to: present.filter(\.isWhisperer), conversationId: offer.conversationId, mode: .control
        )
        return LiveAck(conversationId: offer.conversationId, listenerId: device)
    }

    func listenRequest(_ request: LiveListenRequest, device: String, on connection: ClientConnection) async throws -> LiveAck {
        try requireListener(request.conversationId, device, on: connection)
        try await toWhisperer(
            LiveListenerRequested(conversationId: request.conversationId, listenerId: device, name: request.name),
            conversationId: request.conversationId
        )
        return LiveAck(conversationId: request.conversationId)
    }

    func joining(_ joining: LiveJoining, device: String, on connection: ClientConnection) async throws -> LiveAck {
        let conversationId = joining.conversationId
        try requireListener(conversationId, device, on: connection)
        // Let in first, joined after: a device the Whisperer has not let in never holds a
        // joined place, not even for the moment of a lookup, so no content reaches it.
        let rows = try await postgres.query(
            """
            SELECT name FROM live_listeners WHERE conversation_id = \(conversationId)
              AND listener_id = live_profile_of(\(device))
            """,
            logger: logger
        )
        var name: String?
        for try await row in rows.decode(String.self) { name = row }
        guard let name else { throw WhisperError(.forbidden, "the Whisperer has not let this listener in") }
        let others = try await entries(conversationId).filter { !$0.isWhisperer && $0.joined && !($0.gateway == instanceID && $0.connId == connection.id) }
        guard others.count < limits.maxSockets else {
            throw WhisperError(.forbidden, "this conversation has as many listeners as it takes")
        }
        registry.setJoined(connection.id, conversationId, true)
        try await record(connection.id, conversationId, isWhisperer: false, id: device, joined: true)
        try await toWhisperer(LiveListenerJoined(conversationId: conversationId, listenerId: device, name: name), conversationId: conversationId)
        return LiveAck(conversationId: conversationId)
    }

    func listenerPacket(_ packet: LiveListenerPacket, device: String, on connection: ClientConnection) async throws {
        guard registry.place(connection.id, packet.conversationId)?.joined == true else {
            throw WhisperError(.forbidden, "join the conversation first")
        }
        try requireListener(packet.conversationId, device, on: connection)
        try await toWhisperer(
            LiveFromListener(conversationId: packet.conversationId, listenerId: device, keyId: packet.keyId, packet: packet.packet),
            conversationId: packet.conversationId
        )
    }

    // MARK: - Leaving

    /// `live_dropping`, from either side.
    func dropping(_ dropping: LiveDropping, on connection: ClientConnection) async throws -> LiveAck {
        guard let place = registry.leave(connection.id, dropping.conversationId) else { throw Self.noPlace }
        try await left(place, conversationId: dropping.conversationId, connId: connection.id, reason: .dropping)
        return LiveAck(conversationId: dropping.conversationId)
    }

    /// The socket went away: its places are given up and the other side told (`leave`).
    func leaveAll(_ connection: ClientConnection) async {
        for (conversationId, place) in registry.leaveAll(connection.id) {
            do {
                try await left(place, conversationId: conversationId, connId: connection.id, reason: .leave)
            } catch {
                logger.warning("live_leave_failed", metadata: ["error": "\(error)"])
            }
        }
    }

    /// The owner deleted the conversation: every place in it goes, in Redis and on its
    /// gateway (a detach), and each socket that held one is told `deleted`. Packets from
    /// a Whisperer still live in it are refused from then on.
    func deleted(_ conversationId: String) async throws {
        let everyone = try await entries(conversationId)
        try await forget(everyone, conversationId: conversationId)
        try await route(
            LiveDropped(conversationId: conversationId, listenerId: nil, reason: .deleted), to: everyone, conversationId: conversationId, mode: .detach
        )
    }

    private func left(_ place: LiveRegistry.Place, conversationId: String, connId: String, reason: LiveDropped.Reason) async throws {
        try await redis.send("HDEL", RedisKeys.liveSockets(conversationId), Self.field(instanceID, connId))
        switch place.role {
        case .whisperer:
            let listeners = try await entries(conversationId).filter { !$0.isWhisperer }
            try await route(LiveDropped(conversationId: conversationId, listenerId: nil, reason: reason), to: listeners, conversationId: conversationId, mode: .control)
        case .listener(let device):
            try await toWhisperer(LiveDropped(conversationId: conversationId, listenerId: device, reason: reason), conversationId: conversationId)
        }
    }

    // MARK: - Places in Redis

    static func field(_ gateway: String, _ connId: String) -> String { "\(gateway) \(connId)" }

    static func value(isWhisperer: Bool, id: String, joined: Bool, expires: Int64) -> String {
        "\(expires) \(isWhisperer ? "W" : "L") \(id) \(joined ? 1 : 0)"
    }

    /// The command that writes (or renews) one place; the key lasts as long as its newest place.
    static func recording(
        _ connId: String, _ conversationId: String, gateway: String, isWhisperer: Bool, id: String, joined: Bool
    ) -> [RedisCommand] {
        let key = RedisKeys.liveSockets(conversationId)
        let expires = Clock.millisecondsNow() &+ Int64(placeTTL.milliseconds)
        return [
            RedisCommand("HSET", key, field(gateway, connId), value(isWhisperer: isWhisperer, id: id, joined: joined, expires: expires)),
            RedisCommand("PEXPIRE", key, String(Int64(placeTTL.milliseconds))),
        ]
    }

    private func record(_ connId: String, _ conversationId: String, isWhisperer: Bool, id: String, joined: Bool) async throws {
        _ = try await redis.pipeline(Self.recording(connId, conversationId, gateway: instanceID, isWhisperer: isWhisperer, id: id, joined: joined))
    }

    /// Every place in the conversation that has not lapsed (lapsed ones are removed).
    func entries(_ conversationId: String) async throws -> [Entry] {
        let key = RedisKeys.liveSockets(conversationId)
        let (found, lapsed) = Self.places(try await redis.send("HGETALL", key), now: Clock.millisecondsNow())
        if !lapsed.isEmpty { _ = try? await redis.send(RedisCommand("HDEL", [key] + lapsed)) }
        return found
    }

    /// The places of an `HGETALL` of `live:{C}`: those that hold, and the fields of
    /// those that lapsed or cannot be read.
    static func places(_ reply: RESPValue, now: Int64) -> (found: [Entry], lapsed: [String]) {
        guard let flat = reply.array else { return ([], []) }
        var found: [Entry] = []
        var lapsed: [String] = []
        var index = 0
        while index + 1 < flat.count {
            defer { index += 2 }
            guard let field = flat[index].string, let value = flat[index + 1].string else { continue }
            let where_ = field.split(separator: " ")
            let parts = value.split(separator: " ")
            guard where_.count == 2, parts.count == 4, let expires = Int64(parts[0]), expires > now else {
                lapsed.append(field)
                continue
            }
            found.append(Entry(
                gateway: String(where_[0]), connId: String(where_[1]), isWhisperer: parts[1] == "W", id: String(parts[2]), joined: parts[3] == "1"
            ))
        }
        return (found, lapsed)
    }

    // MARK: - A listener's list

    /// `live_profile_conversations_list`: the conversations that let the device's
    /// profile in, the latest first, each live while its Whisperer holds a place in it.
    func conversations(ofDevice device: String) async throws -> LiveProfileConversations {
        let rows = try await postgres.query(
            """
            SELECT c.conversation_id, c.name, c.whisperer_name, (extract(epoch FROM l.authorized_at) * 1000)::bigint
            FROM live_listeners l JOIN live_conversations c ON c.conversation_id = l.conversation_id
            WHERE l.listener_id = live_profile_of(\(device))
            ORDER BY l.authorized_at DESC LIMIT \(WhisperProtocol.Limits.MAX_LIVE_CONVERSATIONS)
            """,
            logger: logger
        )
        var found: [LiveProfileConversations.Entry] = []
        for try await (id, name, whisperer, at) in rows.decode((String, String, String?, Int64).self) {
            found.append(.init(conversationId: id, name: name, whispererName: whisperer, live: false, letInAt: at))
        }
        guard !found.isEmpty else { return LiveProfileConversations(conversations: []) }
        let places = try await redis.pipeline(found.map { RedisCommand("HGETALL", RedisKeys.liveSockets($0.conversationId)) })
        let now = Clock.millisecondsNow()
        for (index, reply) in zip(found.indices, places) {
            found[index].live = Self.places(reply, now: now).found.contains(where: \.isWhisperer)
        }
        return LiveProfileConversations(conversations: found)
    }

    private func forget(_ entries: [Entry], conversationId: String) async throws {
        guard !entries.isEmpty else { return }
        try await redis.send(RedisCommand("HDEL", [RedisKeys.liveSockets(conversationId)] + entries.map { Self.field($0.gateway, $0.connId) }))
    }

    // MARK: - Relaying

    /// Each gateway writes the frame to those of its sockets `LiveRegistry` still admits:
    /// this one at once, before `route` returns (so a frame that answers the request
    /// comes after it), the others through one command each, all in one round trip.
    private func route<P: ServerPayload>(_ payload: P, to targets: [Entry], conversationId: String, mode: LiveRoute.Mode) async throws {
        guard !targets.isEmpty else { return }
        let frame = ServerFrameCodec.encode(payload)
        let route = LiveRoute(conversationId: conversationId, mode: mode)
        var byGateway: [String: [String]] = [:]
        for target in targets { byGateway[target.gateway, default: []].append(target.connId) }
        if let here = byGateway.removeValue(forKey: instanceID) {
            registry.write(frame, to: here, route, through: connections)
        }
        let commands = byGateway.map { gateway, connIds in
            var command = GatewayCommand(kind: .live, connId: connIds.joined(separator: ","), frame: frame)
            command.liveRoute = route
            return command.publishing(to: gateway)
        }
        guard !commands.isEmpty else { return }
        _ = try await redis.pipeline(commands)
    }

    private func toWhisperer<P: ServerPayload>(_ payload: P, conversationId: String) async throws {
        try await route(payload, to: try await entries(conversationId).filter(\.isWhisperer), conversationId: conversationId, mode: .control)
    }

    // MARK: - Checks

    static let noPlace = WhisperError(.notFound, "this socket has no place in that conversation")

    /// The conversation's name, when `owner` owns it; `whisperingAs` is kept as the name
    /// its Whisperer whispers under, for its listeners' lists.
    private func ownedName(_ conversationId: String, owner: String, whisperingAs whispererName: String? = nil) async throws -> String {
        let rows = if let whispererName {
            try await postgres.query(
                """
                UPDATE live_conversations SET whisperer_name = \(whispererName)
                WHERE conversation_id = \(conversationId) AND owner_id = \(owner) RETURNING name
                """,
                logger: logger
            )
        } else {
            try await postgres.query(
                "SELECT name FROM live_conversations WHERE conversation_id = \(conversationId) AND owner_id = \(owner)", logger: logger
            )
        }
        for try await name in rows.decode(String.self) { return name }
        throw WhisperError(.notFound, "no such conversation of yours")
    }

    private func requireWhisperer(_ conversationId: String, _ whisperId: String, on connection: ClientConnection) throws {
        guard registry.place(connection.id, conversationId)?.role == .whisperer(whisperId: whisperId) else {
            throw WhisperError(.notFound, "send live_whisper_offer for that conversation first")
        }
    }

    private func requireListener(_ conversationId: String, _ device: String, on connection: ClientConnection) throws {
        guard registry.place(connection.id, conversationId)?.role == .listener(deviceId: device) else {
            throw WhisperError(.notFound, "send live_listen_offer for that conversation first")
        }
        guard registry.spend(connection.id, conversationId) else {
            throw Limit.liveFramesPerListener.refused(retryAfterMs: nil)
        }
    }
}
