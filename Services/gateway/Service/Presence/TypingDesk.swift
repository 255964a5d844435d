import Prometheus
import WhisperShared

/// Relays `typing` to a direct peer's socket (docs/protocol.md section 8): only between
/// identities that each sent the other a message within `Peers.window` (`Peers.exchanged`), at most one per
/// (sender, peer) every `interval`, and only to a peer with a live socket. Nothing is
/// stored and nothing is answered: whatever is not relayed is dropped and counted.
struct TypingDesk: Sendable {
    static let interval: Duration = .seconds(2)
    let redis: RedisClient
    private let outcomes: [Outcome: Counter]

    enum Outcome: String, CaseIterable {
        case relayed, throttled, notPeer = "not_peer", offline
    }

    init(redis: RedisClient, metrics: ServiceMetrics) {
        self.redis = redis
        outcomes = Dictionary(uniqueKeysWithValues: Outcome.allCases.map { outcome in
            (outcome, metrics.counter(
                "gateway_typing", help: "typing frames by outcome: relayed, throttled (more than one per 2 s per peer), not_peer, offline.",
                labels: [("outcome", outcome.rawValue)]
            ))
        })
    }

    @discardableResult
    func relay(_ typing: Typing, from sender: String) async throws -> Outcome {
        let outcome = try await decide(typing, from: sender)
        outcomes[outcome]?.increment()
        return outcome
    }

    private func decide(_ typing: Typing, from sender: String) async throws -> Outcome {
        guard typing.to != sender else { return .notPeer }
        let now = Clock.millisecondsNow()
        // The sender's slot in the script (throttle, and when the peer last wrote to the
        // sender); the peer's slot beside it (when the sender last wrote to the peer, and
        // where the peer is connected).
        let (reply, others) = try await redis.evaluate(
            Self.gateScript, keys: [RedisKeys.peers(sender), RedisKeys.typing(sender, typing.to)],
            arguments: [typing.to, Int(Self.interval.milliseconds)],
            alongside: [RedisCommand("ZSCORE", RedisKeys.peers(typing.to), sender), RedisCommand("GET", RedisKeys.presence(typing.to))]
        )
        if case .integer(0) = reply { return .throttled }
        guard others.count == 2, Peers.exchanged([reply, others[0]], now: now) else { return .notPeer }
        guard others.count == 2, let socket = others[1].string.flatMap(PresenceRecord.init(encoded:)) else { return .offline }
        let frame = ServerFrameCodec.encode(PeerTyping(from: sender, isTyping: typing.isTyping, timestamp: now))
        try await GatewayCommand(kind: .deliver, connId: socket.connId, frame: frame).publish(to: socket.gateway, on: redis)
        return .relayed
    }

    /// `typing-gate.lua` (its header says what it takes and answers).
    static let gateScript = RedisScript(LuaSource.typingGate)
}
