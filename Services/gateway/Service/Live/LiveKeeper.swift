import Logging
import ServiceLifecycle
import WhisperShared

/// Renews, in Redis, the live-text places of this gateway's sockets while they are
/// open, so the places of a gateway that died lapse (`LiveRelay.placeTTL`) and no
/// sender keeps routing to it.
struct LiveKeeper: Service {
    let registry: LiveRegistry
    let redis: RedisClient
    let instanceID: String
    let interval: Duration
    let logger: Logger

    func run() async throws {
        try await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                let places = registry.all()
                guard !places.isEmpty else { continue }
                let commands = places.flatMap { connId, conversationId, place -> [RedisCommand] in
                    let (isWhisperer, id): (Bool, String) = switch place.role {
                    case .whisperer(let whisperId): (true, whisperId)
                    case .listener(let device): (false, device)
                    }
                    return LiveRelay.recording(connId, conversationId, gateway: instanceID, isWhisperer: isWhisperer, id: id, joined: place.joined)
                }
                do {
                    _ = try await redis.pipeline(commands)
                } catch {
                    logger.warning("live_places_refresh_failed", metadata: ["error": "\(error)", "places": "\(places.count)"])
                }
            }
        }
    }
}
