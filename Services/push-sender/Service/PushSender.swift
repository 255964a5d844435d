import AsyncHTTPClient
import Logging
import ServiceLifecycle
import WhisperMessaging
import WhisperShared

/// Assembles one push-sender instance: a consumer of the push stream that wakes
/// offline devices through APNs and FCM (docs/protocol.md, "Wake-ups").
public func buildPushSender(settings: PushSenderSettings, logger: Logger, onServerRunning: (@Sendable (Int) async -> Void)? = nil) -> HTTPServiceHandle {
    var problems: [String] = []
    let client = ProviderHTTP.makeClient(extraTrustRootsPath: settings.extraTrustRootsPath, requestTimeout: settings.requestTimeout)
    var apns: (any PushProvider)?
    if let configuration = settings.apns {
        do {
            apns = try APNsProvider(settings: configuration, client: client, timeout: settings.requestTimeout)
        } catch {
            problems.append("PUSH_APNS_KEY_PATH does not hold a P-256 private key in PEM: \(error)")
        }
    }
    var fcm: (any PushProvider)?
    if let configuration = settings.fcm {
        do {
            fcm = try FCMProvider(settings: configuration, client: client, timeout: settings.requestTimeout)
        } catch {
            problems.append("the FCM service account's private_key is not an RSA private key in PEM: \(error)")
        }
    }
    return buildHTTPService(
        settings: settings.common,
        logger: logger,
        workers: { [apns, fcm] environment in
            if apns == nil { environment.logger.notice("push_provider_off", metadata: ["provider": "apns"]) }
            if fcm == nil { environment.logger.notice("push_provider_off", metadata: ["provider": "fcm"]) }
            // One worker per shard of the stream, each reading on a client of its own; the
            // providers' slots are shared by all of them.
            let shards = StreamGroupReader.shards(
                of: PushStream.key, configuration: settings.common.redis, clientName: "whisper-push-reader", logger: environment.logger
            )
            let devices = DeviceDirectory(postgres: environment.postgres, logger: environment.logger)
            let metrics = PushMetrics(metrics: environment.metrics)
            let slots = ["apns": Slots(settings.inFlightPerProvider), "fcm": Slots(settings.inFlightPerProvider)]
            let workers = shards.map { shard in
                PushWorker(
                    streamKey: shard.key, reader: shard.reader, redis: environment.redis,
                    devices: devices, apns: apns, fcm: fcm, consumerName: settings.common.instanceID, settings: settings,
                    metrics: metrics, logger: environment.logger, providerSlots: slots
                )
            }
            let readers: [any Service] = workers.map(\.reader)
            return readers + workers + [
                UnreadShards(redis: environment.redis, base: PushStream.key, logger: environment.logger), HTTPClientShutdown(client: client),
            ]
        },
        startupProblems: problems,
        onServerRunning: onServerRunning
    )
}

/// Closes the providers' HTTP client when the service stops.
struct HTTPClientShutdown: Service {
    let client: HTTPClient

    func run() async throws {
        try? await gracefulShutdown()
        try await client.shutdown()
    }
}

/// `push-sender replay-dead`: moves dead-lettered wake-ups back into the push stream as
/// new jobs (first attempt), oldest first, and deletes them from the dead-letter stream,
/// shard by shard (each shard's dead letters go back into that shard).
public enum ReplayDeadCommand {
    /// Returns how many were moved (at most `limit`).
    public static func run(settings: PushSenderSettings, limit: Int, logger: Logger) async throws -> Int {
        let redis = RedisClient(configuration: settings.common.redis, logger: logger)
        return try await withThrowingTaskGroup(of: Int?.self) { group in
            group.addTask {
                try await redis.run()
                return nil
            }
            var moved = 0
            var connected = false
            for _ in 0..<200 where !connected {
                connected = redis.isConnected
                if !connected { try await Task.sleep(for: .milliseconds(25)) }
            }
            for shard in redis.configuration.streamShards.keys(PushStream.key) {
                while moved < limit {
                    let reply = try await redis.evaluate(
                        replayScript, keys: [PushStream.deadKey(of: shard), shard],
                        arguments: [min(500, limit - moved), PushStream.maxLength, Clock.millisecondsNow()]
                    )
                    let count = Int(reply.int ?? 0)
                    moved += count
                    if count == 0 { break }
                }
            }
            group.cancelAll()
            return moved
        }
    }

    /// `push-replay.lua` (its header says what it takes and answers).
    static let replayScript = RedisScript(LuaSource.pushReplay)
}
