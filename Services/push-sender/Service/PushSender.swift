import Logging
import WhisperShared

/// Delivers wake-up pushes through APNs and FCM from the push stream.
public enum PushSenderIdentity: ServiceIdentity {
    public static let serviceName = "push-sender"
    public static let defaultPort = 8083
}

public typealias PushSenderSettings = CommonServiceSettings<PushSenderIdentity>

/// Assembles one push-sender instance.
public func buildPushSender(settings: PushSenderSettings, logger: Logger, onServerRunning: (@Sendable (Int) async -> Void)? = nil) -> HTTPServiceHandle {
    buildHTTPService(settings: settings.common, logger: logger, onServerRunning: onServerRunning)
}
