import Logging
import WhisperShared

/// Renews, in Redis, the live-text places of this gateway's sockets while they are
/// open, so the places of a gateway that died lapse (`LiveRelay.placeTTL`) and no
/// sender keeps routing to it.
enum LiveKeeper {
    static func periodic(registry: LiveRegistry, redis: RedisClient, instanceID: String, interval: Duration, logger: Logger) -> Periodic {
        Periodic(every: interval, waitingFirst: true, failure: "live_places_refresh_failed", logger: logger) {
            let places = registry.all()
            guard !places.isEmpty else { return nil }
            let commands = places.flatMap { connId, conversationId, place -> [RedisCommand] in
                let (isWhisperer, id): (Bool, String) = switch place.role {
                case .whisperer(let whisperId): (true, whisperId)
                case .listener(let device): (false, device)
                }
                return LiveRelay.recording(connId, conversationId, gateway: instanceID, isWhisperer: isWhisperer, id: id, joined: place.joined)
            }
            _ = try await redis.pipeline(commands)
            return nil
        }
    }
}
