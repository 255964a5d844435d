import Logging
import WhisperShared

/// Challenges, registration and recovery, sessions, device push tokens, key lookup and contacts backup.
public enum AuthIdentity: ServiceIdentity {
    public static let serviceName = "auth"
    public static let defaultPort = 8081
}

public typealias AuthSettings = CommonServiceSettings<AuthIdentity>

/// Assembles one auth instance.
public func buildAuth(settings: AuthSettings, logger: Logger, onServerRunning: (@Sendable (Int) async -> Void)? = nil) -> HTTPServiceHandle {
    buildHTTPService(settings: settings.common, logger: logger, onServerRunning: onServerRunning)
}
