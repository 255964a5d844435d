import Synchronization
import WhisperShared

/// This gateway's record of the places its sockets hold in live-text conversations:
/// who each socket is in each conversation (the Whisperer, or a listener device), and
/// whether a listener joined. The frames that reach a socket are checked against it
/// (`LiveRoute`), whatever another gateway asked for. Redis holds the same places for
/// every gateway (`LiveRelay`); this copy is the one that decides delivery here.
final class LiveRegistry: Sendable {
    enum Role: Sendable, Equatable {
        case whisperer(whisperId: String)
        case listener(deviceId: String)
    }

    struct Place: Sendable {
        var role: Role
        var joined = false
        /// Frames this socket may send in this conversation (packets of a Whisperer,
        /// every frame of a listener), at `rule`.
        var bucket: LocalBucket
        let rule: RateLimitRule
    }

    /// Conversations one socket may hold a place in at once.
    static let maxPlacesPerSocket = 4

    private let places = Mutex<[String: [String: Place]]>([:])

    /// Gives the socket its place; false when it already holds `maxPlacesPerSocket`
    /// others. A socket's place with another role is replaced.
    func take(_ connId: String, _ conversationId: String, role: Role, rule: RateLimitRule) -> Bool {
        places.withLock { all in
            var held = all[connId, default: [:]]
            if let current = held[conversationId], current.role == role { return true }
            guard held[conversationId] != nil || held.count < Self.maxPlacesPerSocket else { return false }
            held[conversationId] = Place(role: role, bucket: LocalBucket(full: rule), rule: rule)
            all[connId] = held
            return true
        }
    }

    /// Whether the socket holds a place in any conversation.
    func holdsAny(_ connId: String) -> Bool {
        places.withLock { $0[connId] != nil }
    }

    func place(_ connId: String, _ conversationId: String) -> Place? {
        places.withLock { $0[connId]?[conversationId] }
    }

    func setJoined(_ connId: String, _ conversationId: String, _ joined: Bool) {
        places.withLock { $0[connId]?[conversationId]?.joined = joined }
    }

    /// Takes a token of the socket's bucket in the conversation; false when empty or no place.
    func spend(_ connId: String, _ conversationId: String) -> Bool {
        places.withLock { all in
            guard var place = all[connId]?[conversationId] else { return false }
            let taken = place.bucket.take(place.rule)
            all[connId]?[conversationId] = place
            return taken
        }
    }

    @discardableResult
    func leave(_ connId: String, _ conversationId: String) -> Place? {
        places.withLock { all in
            let place = all[connId]?.removeValue(forKey: conversationId)
            if all[connId]?.isEmpty == true { all[connId] = nil }
            return place
        }
    }

    /// Every place of a socket that went away, given up.
    func leaveAll(_ connId: String) -> [(conversationId: String, place: Place)] {
        places.withLock { all in
            let held = all.removeValue(forKey: connId) ?? [:]
            return held.map { ($0.key, $0.value) }
        }
    }

    /// Every place on this gateway, for the keeper that renews them in Redis.
    func all() -> [(connId: String, conversationId: String, place: Place)] {
        places.withLock { all in
            all.flatMap { connId, held in held.map { (connId, $0.key, $0.value) } }
        }
    }

    /// Whether a frame routed to this socket may be written to it.
    func admits(_ connId: String, _ route: LiveRoute) -> Bool {
        places.withLock { all in
            guard let place = all[connId]?[route.conversationId] else { return false }
            switch route.mode {
            case .content:
                if case .listener = place.role { return place.joined }
                return false
            case .control:
                return true
            case .detach:
                all[connId]?[route.conversationId] = nil
                if all[connId]?.isEmpty == true { all[connId] = nil }
                return true
            }
        }
    }

    /// Writes a frame routed in live text to each of `connIds` on this gateway that its
    /// place admits, whether it came through Redis (`ControlChannel`) or from a desk of
    /// this gateway (`LiveRelay`).
    func write(_ frame: [UInt8], to connIds: some Sequence<String>, _ route: LiveRoute, through connections: ConnectionRegistry) {
        for connId in connIds where admits(connId, route) {
            connections.connection(connId)?.sendRaw(frame)
        }
    }
}
