import Logging
import WhisperShared

/// The operator API: stats, reports, bans, audit, GC trigger; also runs schema migrations (admin migrate).
public enum AdminIdentity: ServiceIdentity {
    public static let serviceName = "admin"
    public static let defaultPort = 8086
}

public typealias AdminSettings = CommonServiceSettings<AdminIdentity>

/// Assembles one admin instance.
public func buildAdmin(settings: AdminSettings, logger: Logger, onServerRunning: (@Sendable (Int) async -> Void)? = nil) -> HTTPServiceHandle {
    buildHTTPService(settings: settings.common, logger: logger, onServerRunning: onServerRunning)
}
