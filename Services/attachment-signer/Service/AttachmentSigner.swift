import Logging
import WhisperShared

/// Issues presigned upload and download URLs for encrypted attachments.
public enum AttachmentSignerIdentity: ServiceIdentity {
    public static let serviceName = "attachment-signer"
    public static let defaultPort = 8084
}

public typealias AttachmentSignerSettings = CommonServiceSettings<AttachmentSignerIdentity>

/// Assembles one attachment-signer instance.
public func buildAttachmentSigner(settings: AttachmentSignerSettings, logger: Logger, onServerRunning: (@Sendable (Int) async -> Void)? = nil) -> HTTPServiceHandle {
    buildHTTPService(settings: settings.common, logger: logger, onServerRunning: onServerRunning)
}
