import Logging
import WhisperShared

/// Deletes expired attachments, pending entries and stale rows on a timer.
public enum GCWorkerIdentity: ServiceIdentity {
    public static let serviceName = "gc-worker"
    public static let defaultPort = 8087
}

public typealias GCWorkerSettings = CommonServiceSettings<GCWorkerIdentity>

/// Assembles one gc-worker instance.
public func buildGCWorker(settings: GCWorkerSettings, logger: Logger, onServerRunning: (@Sendable (Int) async -> Void)? = nil) -> HTTPServiceHandle {
    buildHTTPService(settings: settings.common, logger: logger, onServerRunning: onServerRunning)
}
