import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import PostgresNIO
import WhisperShared

/// Settings of attachment-signer (docs/configuration.md lists each variable).
public struct AttachmentSignerSettings: ServiceSettings {
    public static let serviceName = "attachment-signer"
    public static let defaultPort = 8084
    public var common: CommonSettings
    public var s3: S3Settings
    /// How long a presigned upload URL works.
    public var uploadURLTTL: Duration = .seconds(900)
    /// How long a presigned download URL works.
    public var downloadURLTTL: Duration = .seconds(300)
    /// How long an attachment is kept at most (gc-worker deletes it after).
    public var attachmentTTL: Duration = .seconds(30 * 86_400)
    /// The rate limits the signer charges (`Limit.registry`, the `attachment.signer.` ones).
    public var limits = LimitRules()
    /// Bytes of one identity's uploads in the bucket at once (declared sizes of every
    /// upload not yet deleted, sent or not).
    public var quotaLiveBytes: Int64 = AttachmentSignerSettings.defaultQuotaLiveBytes
    /// Bytes of one identity's uploads that no message has named yet.
    public var quotaUnsentBytes: Int64 = AttachmentSignerSettings.defaultQuotaUnsentBytes
    public static let defaultQuotaLiveBytes: Int64 = 2 << 30
    public static let defaultQuotaUnsentBytes: Int64 = 256 << 20

    public init(common: CommonSettings, s3: S3Settings) {
        self.common = common
        self.s3 = s3
    }

    public init(from settings: SettingsReader) {
        self.init(common: CommonSettings(service: Self.serviceName, defaultPort: Self.defaultPort, from: settings), s3: S3Settings(from: settings))
        uploadURLTTL = settings.seconds("attachment.signer.upload.url.seconds", default: uploadURLTTL, range: 60...86_400)
        downloadURLTTL = settings.seconds("attachment.signer.download.url.seconds", default: downloadURLTTL, range: 30...86_400)
        attachmentTTL = .seconds(settings.int("whisper.attachment.ttl.days", default: Int(attachmentTTL.milliseconds / 86_400_000), range: 1...3_650) * 86_400)
        limits = LimitRules(from: settings, service: Self.serviceName)
        let most = 1 << 50
        quotaLiveBytes = Int64(settings.int("attachment.signer.quota.live.bytes", default: Int(Self.defaultQuotaLiveBytes), range: 1...most))
        quotaUnsentBytes = Int64(settings.int("attachment.signer.quota.unsent.bytes", default: Int(Self.defaultQuotaUnsentBytes), range: 1...most))
    }
}

/// Assembles one attachment-signer: presigned uploads and downloads of encrypted
/// attachments (docs/protocol.md section 12, "Attachments").
public func buildAttachmentSigner(
    settings: AttachmentSignerSettings, logger: Logger, onServerRunning: (@Sendable (Int) async -> Void)? = nil
) -> HTTPServiceHandle {
    buildHTTPService(
        settings: settings.common,
        logger: logger,
        routes: { router, environment in
            AttachmentRoutes(
                ledger: AttachmentLedger(postgres: environment.postgres, logger: environment.logger),
                store: S3Client(signer: settings.s3.signer),
                sessions: SessionStore(redis: environment.redis),
                limiter: RateLimiter(redis: environment.redis),
                settings: settings,
                metrics: environment.metrics,
                logger: environment.logger
            ).register(on: router)
        },
        onServerRunning: onServerRunning
    )
}

/// What `POST /attachments/presign` takes.
struct PresignRequest: Decodable {
    var contentType: String
    var sizeBytes: Int64
    var purpose: String
}

/// The `attachments` rows, as attachment-signer reads and writes them.
struct AttachmentLedger: Sendable {
    let postgres: PostgresClient
    let logger: Logger

    struct Record: Sendable {
        /// Nil once the uploader deleted its account (the attachment then expires).
        var uploader: String?
        var size: Int64
        var live: Bool
        var verified: Bool
        var rejected: Bool
        var sentTo: Bool
    }

    /// The quota an upload would pass, with what the identity's uploads hold already.
    enum QuotaRefusal: Sendable, Equatable {
        /// Uploads that no message has named yet.
        case unsent(held: Int64)
        /// Every upload not deleted yet, sent or not.
        case live(held: Int64)
    }

    /// Records an upload unless it would take the uploader past a quota; returns which
    /// (nil when recorded). Presigns of one identity take turns (an advisory lock on it),
    /// so two at once cannot both squeeze under a quota.
    func record(
        objectKey: String, uploader: String, contentType: String, size: Int64, purpose: String, expiresAt: Date,
        liveQuota: Int64, unsentQuota: Int64
    ) async throws -> QuotaRefusal? {
        try await postgres.withTransaction(logger: logger) { connection -> QuotaRefusal? in
            _ = try await connection.query("SELECT pg_advisory_xact_lock(hashtextextended(\(uploader), 6))", logger: logger)
            let rows = try await connection.query("""
                SELECT coalesce(sum(size_bytes), 0)::int8,
                       coalesce(sum(size_bytes) FILTER (
                           WHERE NOT EXISTS (SELECT 1 FROM attachment_recipients r WHERE r.object_key = a.object_key)), 0)::int8
                FROM attachments a WHERE uploader_id = \(uploader) AND deleted_at IS NULL
                """, logger: logger)
            var (live, unsent): (Int64, Int64) = (0, 0)
            for try await usage in rows.decode((Int64, Int64).self) { (live, unsent) = usage }
            let (unsentAfter, unsentOverflow) = unsent.addingReportingOverflow(size)
            if unsentOverflow || unsentAfter > unsentQuota { return .unsent(held: unsent) }
            let (liveAfter, liveOverflow) = live.addingReportingOverflow(size)
            if liveOverflow || liveAfter > liveQuota { return .live(held: live) }
            _ = try await connection.query("""
                INSERT INTO attachments (object_key, uploader_id, content_type, size_bytes, purpose, expires_at)
                VALUES (\(objectKey), \(uploader), \(contentType), \(size), \(purpose), \(expiresAt))
                """, logger: logger)
            return nil
        }
    }

    /// The attachment as `reader` may see it.
    func find(_ objectKey: String, reader: String) async throws -> Record? {
        let rows = try await postgres.query("""
            SELECT uploader_id, size_bytes, deleted_at IS NULL AND expires_at > now(), verified_at IS NOT NULL, rejected_at IS NOT NULL,
                   EXISTS (SELECT 1 FROM attachment_recipients r WHERE r.object_key = a.object_key AND r.recipient_id = \(reader))
            FROM attachments a WHERE object_key = \(objectKey)
            """)
        for try await (uploader, size, live, verified, rejected, sentTo) in rows.decode((String?, Int64, Bool, Bool, Bool, Bool).self) {
            return Record(uploader: uploader, size: size, live: live, verified: verified, rejected: rejected, sentTo: sentTo)
        }
        return nil
    }

    func markVerified(_ objectKey: String) async throws {
        try await postgres.query("UPDATE attachments SET verified_at = now() WHERE object_key = \(objectKey) AND verified_at IS NULL")
    }

    func markRejected(_ objectKey: String) async throws {
        try await postgres.query("UPDATE attachments SET rejected_at = now() WHERE object_key = \(objectKey) AND rejected_at IS NULL")
    }
}

struct AttachmentRoutes: Sendable {
    let ledger: AttachmentLedger
    let store: S3Client
    let sessions: SessionStore
    let limiter: RateLimiter
    let settings: AttachmentSignerSettings
    let metrics: ServiceMetrics
    let logger: Logger

    /// The content type of every upload: the blob is ciphertext whatever it holds.
    static let uploadContentType = "application/octet-stream"
    static let purposes: Set<String> = ["message_attachment"]

    func register(on router: Router<ClientRequestContext>) {
        let presigned = metrics.counter("attachment_presigns", help: "Upload URLs handed out.")
        let downloads = metrics.counter("attachment_downloads", help: "Download URLs handed out.")
        let rejected = metrics.counter("attachment_objects_rejected", help: "Uploaded objects whose size or type differed from their declaration.")
        let quotaRefusals = metrics.counter("attachment_quota_refusals", help: "Presigns refused because the identity's uploads would pass a quota.")
        router.post("/attachments/presign") { request, _ -> Response in
            let session = try await sessions.authenticate(request)
            let body = try await request.body.collect(upTo: 4_096)
            let presign = try Self.checked(body)
            try await limiter.chargeRequest(.presignPerIdentity, key: session.whisperId, rules: settings.limits)
            let now = Date()
            let objectKey = Self.objectKey(at: now)
            let over = try await ledger.record(
                objectKey: objectKey, uploader: session.whisperId, contentType: presign.contentType, size: presign.sizeBytes,
                purpose: presign.purpose, expiresAt: now.addingTimeInterval(Double(settings.attachmentTTL.components.seconds)),
                liveQuota: settings.quotaLiveBytes, unsentQuota: settings.quotaUnsentBytes
            )
            if let over {
                quotaRefusals.increment()
                let message = switch over {
                case .unsent(let held):
                    "uploads not sent yet hold \(held) of \(settings.quotaUnsentBytes) bytes: send them, or wait for them to be collected"
                case .live(let held):
                    "this identity's attachments hold \(held) of \(settings.quotaLiveBytes) bytes: wait for recipients to take them"
                }
                throw WhisperHTTPError(.rateLimited, message, headers: [.retryAfter: "3600"])
            }
            let seconds = Int(settings.uploadURLTTL.components.seconds)
            let headers = ["Content-Length": String(presign.sizeBytes), "Content-Type": Self.uploadContentType]
            let url = settings.s3.publicSigner.presignedURL(method: "PUT", key: objectKey, expires: seconds, headers: headers, date: now)
            presigned.increment()
            logger.info("attachment_presigned", metadata: ["whisperId": "\(session.whisperId)", "objectKey": "\(objectKey)", "sizeBytes": "\(presign.sizeBytes)"])
            return try JSONResponse.make([
                "uploadUrl": url, "objectKey": objectKey, "expiresAt": Self.milliseconds(now) + Int64(seconds) * 1000, "headers": headers,
            ])
        }
        // The objectKey has slashes of its own (`att/2026/11/<uuid>.bin`): it is carried
        // as it is, segment by segment, before `/download`.
        router.get("/attachments/**") { request, context -> Response in
            let session = try await sessions.authenticate(request)
            let segments = context.parameters.getCatchAll().map(String.init)
            guard segments.count >= 2, segments.last == "download" else { throw WhisperHTTPError(.notFound, "no such endpoint") }
            let objectKey = segments.dropLast().joined(separator: "/")
            guard Format.isObjectKey(objectKey) else {
                throw WhisperHTTPError(.invalidPayload, "objectKey must be one issued by /attachments/presign (att/YYYY/MM/<uuid>.bin)")
            }
            try await limiter.chargeRequest(.downloadPerIdentity, key: session.whisperId, rules: settings.limits)
            // Anyone who is neither its uploader nor a recipient learns nothing, not even
            // whether it exists.
            guard let record = try await ledger.find(objectKey, reader: session.whisperId), record.live, !record.rejected,
                  record.uploader == session.whisperId || record.sentTo else {
                throw WhisperHTTPError(.notFound, "no such attachment")
            }
            if !record.verified {
                guard let stored = try await store.head(objectKey) else {
                    throw WhisperHTTPError(.notFound, "the attachment has not been uploaded (yet)")
                }
                guard stored.size == record.size, stored.contentType == Self.uploadContentType else {
                    try await ledger.markRejected(objectKey)
                    rejected.increment()
                    logger.warning("attachment_rejected", metadata: [
                        "objectKey": "\(objectKey)", "declaredBytes": "\(record.size)", "storedBytes": "\(stored.size)",
                    ])
                    throw WhisperHTTPError(.notFound, "no such attachment")
                }
                try await ledger.markVerified(objectKey)
            }
            let now = Date()
            let seconds = Int(settings.downloadURLTTL.components.seconds)
            let url = settings.s3.publicSigner.presignedURL(method: "GET", key: objectKey, expires: seconds, date: now)
            downloads.increment()
            return try JSONResponse.make(["downloadUrl": url, "expiresAt": Self.milliseconds(now) + Int64(seconds) * 1000])
        }
    }

    /// The request body, held to the rules before anything is recorded.
    static func checked(_ body: ByteBuffer) throws -> PresignRequest {
        guard let object = try? JSONSerialization.jsonObject(with: Data(buffer: body)) as? [String: Any] else {
            throw WhisperHTTPError(.invalidPayload, "the body must be a JSON object {contentType, sizeBytes, purpose}")
        }
        let known: Set<String> = ["contentType", "sizeBytes", "purpose"]
        if let unknown = object.keys.first(where: { !known.contains($0) }) {
            throw WhisperHTTPError(.invalidPayload, "\(unknown) is not a field of a presign request")
        }
        guard let request = try? JSONDecoder().decode(PresignRequest.self, from: Data(buffer: body)) else {
            throw WhisperHTTPError(.invalidPayload, "contentType and purpose must be strings, sizeBytes an integer")
        }
        let contentType = request.contentType
        guard Format.isContentType(contentType) else {
            throw WhisperHTTPError(.invalidPayload, "contentType must be a MIME type (image/jpeg)")
        }
        let size = request.sizeBytes
        guard size >= 1 else {
            throw WhisperHTTPError(.invalidPayload, "sizeBytes must be a positive integer (the ciphertext's size)")
        }
        let limit = Self.limit(for: contentType)
        guard size <= Int64(limit) else {
            throw WhisperHTTPError(.invalidPayload, "sizeBytes is over the \(limit)-byte limit for \(contentType)")
        }
        guard purposes.contains(request.purpose) else {
            throw WhisperHTTPError(.invalidPayload, "purpose must be one of \(purposes.sorted().joined(separator: ", "))")
        }
        return request
    }

    /// The ciphertext limit of a content type: images, voice (audio), other files.
    static func limit(for contentType: String) -> Int {
        if contentType.hasPrefix("image/") { return Limits.MAX_IMAGE_BYTES }
        if contentType.hasPrefix("audio/") { return Limits.MAX_VOICE_BYTES }
        return Limits.MAX_FILE_BYTES
    }

    /// `att/YYYY/MM/<uuid>.bin`, by the UTC month of the upload.
    static func objectKey(at date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC") ?? calendar.timeZone
        let parts = calendar.dateComponents([.year, .month], from: date)
        let month = String(parts.month ?? 1)
        return "att/\(parts.year ?? 1970)/\(month.count == 1 ? "0" + month : month)/\(RandomID.uuid()).bin"
    }

    static func milliseconds(_ date: Date) -> Int64 { Int64(date.timeIntervalSince1970 * 1000) }
}
