import Logging
import WhisperShared

/// Assembles one router instance: a consumer of the router stream that routes
/// messages, receipts and pending-queue pages.
public func buildRouter(settings: RouterSettings, logger: Logger, onServerRunning: (@Sendable (Int) async -> Void)? = nil) -> HTTPServiceHandle {
    buildHTTPService(
        settings: settings.common,
        logger: logger,
        workers: { environment in
            var readerConfiguration = settings.common.redis
            readerConfiguration.clientName = "whisper-router-reader"
            let reader = RedisClient(configuration: readerConfiguration, logger: environment.logger)
            let identities = IdentityCache(
                postgres: environment.postgres, logger: environment.logger, metrics: environment.metrics, ttl: settings.identityCacheTTL,
                unknownTTL: settings.unknownIdentityTTL
            )
            let router = MessageRouter(
                redis: environment.redis,
                identities: identities,
                pending: PendingQueue(redis: environment.redis, capacity: settings.pendingCapacity),
                receipts: ReceiptQueue(redis: environment.redis, capacity: settings.receiptsWaitingMax),
                groups: GroupDesk(
                    postgres: environment.postgres, redis: environment.redis,
                    directory: GroupDirectory(postgres: environment.postgres, logger: environment.logger, metrics: environment.metrics),
                    identities: identities,
                    events: ReceiptQueue(redis: environment.redis, capacity: settings.receiptsWaitingMax),
                    logger: environment.logger
                ),
                settings: settings,
                metrics: RouterMetrics(metrics: environment.metrics),
                logger: environment.logger
            )
            let consumer = StreamConsumer(
                reader: reader, redis: environment.redis, router: router,
                consumerName: settings.common.instanceID, settings: settings, logger: environment.logger
            )
            return [reader, consumer]
        },
        onServerRunning: onServerRunning
    )
}
