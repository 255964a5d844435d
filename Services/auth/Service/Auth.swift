import Logging
import WhisperShared

/// Assembles one auth instance: challenges, registration and recovery, sessions,
/// push tokens and key lookup.
public func buildAuth(settings: AuthSettings, logger: Logger, onServerRunning: (@Sendable (Int) async -> Void)? = nil) -> HTTPServiceHandle {
    buildHTTPService(
        settings: settings.common,
        logger: logger,
        routes: { router, environment in
            let identities = IdentityRepository(postgres: environment.postgres, logger: environment.logger)
            let sessions = SessionStore(redis: environment.redis)
            let limiter = RateLimiter(redis: environment.redis)
            let registration = Registration(
                redis: environment.redis, identities: identities, sessions: sessions,
                presence: PresenceStore(redis: environment.redis), limiter: limiter,
                settings: settings, metrics: environment.metrics, logger: environment.logger
            )
            AuthRoutes(
                registration: registration, sessions: sessions, identities: identities, limiter: limiter,
                settings: settings, metrics: environment.metrics, logger: environment.logger
            ).register(on: router)
        },
        onServerRunning: onServerRunning
    )
}
