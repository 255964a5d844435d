import Logging
import ServiceLifecycle
import WhisperMessaging
import WhisperShared

/// Assembles one router instance: a consumer of the router stream that routes
/// messages, pending-queue pages, group changes and call signaling, and a
/// sweeper that ends calls whose ring timeout has passed.
public func buildRouter(settings: RouterSettings, logger: Logger, onServerRunning: (@Sendable (Int) async -> Void)? = nil) -> HTTPServiceHandle {
    buildHTTPService(
        settings: settings.common,
        logger: logger,
        workers: { environment in
            let identities = IdentityCache(
                postgres: environment.postgres, logger: environment.logger, metrics: environment.metrics, ttl: settings.identityCacheTTL,
                unknownTTL: settings.unknownIdentityTTL
            )
            let calls = CallDesk(
                redis: environment.redis, identities: identities,
                frames: OwedFrames(redis: environment.redis, capacity: settings.receiptsWaitingMax),
                settings: .init(
                    ringTimeout: settings.callRingTimeout, answeredTTL: settings.callAnsweredTTL, sweepInterval: settings.callSweepInterval,
                    limits: settings.limits
                ),
                metrics: CallMetrics(metrics: environment.metrics), logger: environment.logger
            )
            let pending = PendingQueue(redis: environment.redis, capacity: settings.pendingCapacity)
            let metrics = RoutingMetrics(metrics: environment.metrics)
            let groups = GroupDesk(
                postgres: environment.postgres, redis: environment.redis,
                directory: GroupDirectory(postgres: environment.postgres, logger: environment.logger, metrics: environment.metrics),
                identities: identities,
                events: OwedFrames(redis: environment.redis, capacity: settings.groupEventsWaitingMax, store: .groupEvents),
                invitationsPerIdentity: settings.groupInvitationsPerIdentity,
                logger: environment.logger
            )
            let router = MessageRouter(
                redis: environment.redis,
                sending: MessageSending(
                    checks: MessageChecks(identities: identities), attachments: AttachmentRecipients(postgres: environment.postgres),
                    pending: pending, redis: environment.redis, pairLimit: settings.limits[.sendPerPair], metrics: metrics
                ),
                pending: pending,
                receipts: OwedFrames(redis: environment.redis, capacity: settings.receiptsWaitingMax),
                groups: groups,
                accounts: AccountDesk(
                    groups: groups, deletion: AccountDeletion(postgres: environment.postgres, redis: environment.redis, logger: environment.logger),
                    postgres: environment.postgres, logger: environment.logger
                ),
                calls: calls,
                settings: settings,
                metrics: metrics,
                logger: environment.logger
            )
            // One consumer per shard of the stream, each reading on a client of its own.
            let shards = StreamGroupReader.shards(
                of: RouterStream.key, configuration: settings.common.redis, clientName: "whisper-router-reader", logger: environment.logger
            )
            let consumers = shards.map { shard in
                StreamConsumer(
                    streamKey: shard.key, reader: shard.reader, redis: environment.redis,
                    router: router, consumerName: settings.common.instanceID, settings: settings, logger: environment.logger
                )
            }
            // Bans and their lifting reach this router's cache at once, not after its TTL.
            let changes = RedisSubscriber(
                configuration: settings.common.redis, channels: [IdentityChange.channel], logger: environment.logger,
                onMessage: { message in
                    if let change = IdentityChange.decode(message.payload) { identities.forget(change.whisperId) }
                },
                onSubscribed: { identities.forgetAll() }
            )
            let unread = UnreadShards(redis: environment.redis, base: RouterStream.key, logger: environment.logger)
            let readers: [any Service] = consumers.map(\.reader)
            return readers + [changes] + consumers + [CallSweeper.periodic(calls: calls), unread]
        },
        onServerRunning: onServerRunning
    )
}

/// Ends calls nobody answered (`CallDesk.sweepOnce`) every `CallSettings.sweepInterval`
/// until the service stops; a failed sweep leaves the same due calls to the next.
enum CallSweeper {
    static func periodic(calls: CallDesk) -> Periodic {
        Periodic(every: calls.settings.sweepInterval, failure: "call_sweep_failed", logger: calls.logger) {
            try await calls.sweepOnce()
            return nil
        }
    }
}
