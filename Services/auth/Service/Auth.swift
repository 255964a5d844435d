import Logging
import Synchronization
import WhisperShared

/// Assembles one auth instance: challenges, registration and recovery, sessions,
/// push tokens and key lookup.
/// The public port serves key lookup and the operations routes; the internal port
/// (`AuthSettings.internalHTTP`) serves the frame endpoints gateways call.
public func buildAuth(
    settings: AuthSettings, logger: Logger, onServerRunning: (@Sendable (Int) async -> Void)? = nil,
    onInternalServerRunning: (@Sendable (Int) async -> Void)? = nil
) -> HTTPServiceHandle {
    let shared = Mutex<AuthRoutes?>(nil)
    return buildHTTPService(
        settings: settings.common,
        logger: logger,
        routes: { router, environment in
            let identities = IdentityRepository(postgres: environment.postgres, logger: environment.logger, devicesKept: settings.devicesKeptPerIdentity)
            let sessions = SessionStore(redis: environment.redis)
            let limiter = RateLimiter(redis: environment.redis)
            let registration = Registration(
                redis: environment.redis, identities: identities, sessions: sessions,
                presence: PresenceStore(redis: environment.redis), limiter: limiter,
                settings: settings, metrics: environment.metrics, logger: environment.logger
            )
            let reports = ReportDesk(
                postgres: environment.postgres, sessions: sessions, limiter: limiter, rules: settings.limits,
                metrics: environment.metrics, logger: environment.logger
            )
            let routes = AuthRoutes(
                registration: registration, reports: reports, sessions: sessions, identities: identities,
                directory: DirectoryStore(postgres: environment.postgres, logger: environment.logger), limiter: limiter,
                settings: settings, metrics: environment.metrics, logger: environment.logger
            )
            routes.registerPublic(on: router)
            ContactsBackupRoutes(
                postgres: environment.postgres, sessions: sessions, limiter: limiter, rules: settings.limits,
                logger: environment.logger
            ).register(on: router)
            shared.withLock { $0 = routes }
        },
        internalListener: InternalListener(http: settings.internalHTTP, onServerRunning: onInternalServerRunning) { router, _ in
            shared.withLock { $0 }?.registerInternal(on: router)
        },
        startupProblems: settings.internalToken.isEmpty ? ["the internal token (WHISPER_INTERNAL_TOKEN) is empty"] : [],
        onServerRunning: onServerRunning
    )
}
