import Logging
import WhisperShared

/// Routes messages, receipts, groups and call signaling from the router stream; owns the pending queue.
public enum RouterIdentity: ServiceIdentity {
    public static let serviceName = "router"
    public static let defaultPort = 8082
}

public typealias RouterSettings = CommonServiceSettings<RouterIdentity>

/// Assembles one router instance.
public func buildRouter(settings: RouterSettings, logger: Logger, onServerRunning: (@Sendable (Int) async -> Void)? = nil) -> HTTPServiceHandle {
    buildHTTPService(settings: settings.common, logger: logger, onServerRunning: onServerRunning)
}
