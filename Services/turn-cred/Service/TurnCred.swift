import Logging
import WhisperShared

/// Issues time-limited TURN credentials in coturn's REST-API scheme.
public enum TurnCredIdentity: ServiceIdentity {
    public static let serviceName = "turn-cred"
    public static let defaultPort = 8085
}

public typealias TurnCredSettings = CommonServiceSettings<TurnCredIdentity>

/// Assembles one turn-cred instance.
public func buildTurnCred(settings: TurnCredSettings, logger: Logger, onServerRunning: (@Sendable (Int) async -> Void)? = nil) -> HTTPServiceHandle {
    buildHTTPService(settings: settings.common, logger: logger, onServerRunning: onServerRunning)
}
