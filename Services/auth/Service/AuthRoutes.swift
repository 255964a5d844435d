import Foundation
import HTTPTypes
import Hummingbird
import Logging
import WhisperShared

/// The internal frame endpoints the gateway calls, and the client endpoints of auth.
struct AuthRoutes: Sendable {
    let registration: Registration
    let reports: ReportDesk
    let sessions: SessionStore
    let identities: IdentityRepository
    let directory: DirectoryStore
    let limiter: RateLimiter
    let settings: AuthSettings
    let metrics: ServiceMetrics
    let logger: Logger

    /// What clients reach through the load balancer.
    func registerPublic(on router: Router<ClientRequestContext>) {
        router.get("/users/:whisperId/keys") { request, context in
            try await keys(request, context)
        }
        // The key directory's audit endpoints (docs/key-transparency.md): public, read-only,
        // bounded per client address.
        router.get("/kt/keys") { request, context -> Response in
            try await limitDirectory(request, context)
            guard let keys = try await directory.keys() else { throw WhisperHTTPError(.notFound, "the key directory has not started") }
            return try JSONResponse.make(encoding: keys, cacheControl: "public, max-age=300")
        }
        router.get("/kt/head") { request, context -> Response in
            let since = try Self.epoch(request.uri.queryParameters.get("since"), name: "since")
            try await limitDirectory(request, context)
            guard let head = try await directory.head() else { throw WhisperHTTPError(.notFound, "no epoch published yet") }
            let audits = try await directory.audits(of: settings.auditorKeys.map(Ed25519.keyId))
            return try JSONResponse.make(
                encoding: HeadAnswer(head: head, consistency: try await consistency(since: since, head: head), audits: audits.isEmpty ? nil : audits),
                cacheControl: "no-cache"
            )
        }
        // An auditor's signature of a head it verified: only configured auditors' keys.
        router.post("/kt/audits") { request, context -> Response in
            try await limitDirectory(request, context)
            struct Answer: Encodable { var recorded: Bool }
            return try JSONResponse.make(encoding: Answer(recorded: try await recordAudit(request)), cacheControl: "no-store")
        }
        router.get("/kt/epochs/:epoch") { request, context -> Response in
            guard let epoch = try Self.epoch(context.parameters.get("epoch"), name: "epoch") else {
                throw WhisperHTTPError(.invalidPayload, "epoch must be a positive integer")
            }
            try await limitDirectory(request, context)
            guard let update = try await directory.update(epoch: epoch) else { throw WhisperHTTPError(.notFound, "no such epoch") }
            // A published epoch never changes.
            return JSONResponse.raw(update, cacheControl: "public, max-age=31536000, immutable")
        }
    }

    private func limitDirectory(_ request: Request, _ context: ClientRequestContext) async throws {
        let client = context.clientAddress(of: request, trusted: settings.common.trustedProxies)
        try await limiter.chargeRequest(.directoryPerAddress, key: RateLimiter.addressKey(client), rules: settings.limits)
    }

    /// What only gateways call, on the internal port.
    func registerInternal(on router: Router<BasicRequestContext>) {
        frame(RegisterBegin.self, on: router) { try await registration.begin($0, context: $1) }
        frame(RegisterProof.self, on: router) { try await registration.proof($0, context: $1) }
        frame(SessionRefresh.self, on: router) { try await registration.refresh($0, context: $1) }
        frame(Logout.self, on: router) { try await registration.logout($0, context: $1) }
        frame(UpdateTokens.self, on: router) { try await registration.updateTokens($0, context: $1) }
        frame(ReportUser.self, on: router) { try await reports.file($0, context: $1) }
    }

    private func frame<P: ClientPayload, R: ServerPayload>(
        _ type: P.Type, on router: Router<BasicRequestContext>,
        _ handle: @escaping @Sendable (P, ConnectionContext) async throws -> R
    ) {
        InternalFrameEndpoints(
            internalToken: settings.internalToken, previousToken: settings.previousInternalToken, metrics: metrics, logger: logger
        ).register(type, on: router, handle)
    }

    /// `GET /users/{whisperId}/keys` (docs/protocol.md section 12).
    private func keys(_ request: Request, _ context: ClientRequestContext) async throws -> Response {
        let caller = try await authenticate(request)
        guard let whisperId = context.parameters.get("whisperId"), Format.isWhisperID(whisperId) else {
            throw WhisperHTTPError(.invalidPayload, "whisperId must be a Whisper ID (WSP-XXXX-XXXX-XXXX)")
        }
        try await limiter.chargeRequest(.keyLookupPerIdentity, key: caller.whisperId, rules: settings.limits)
        guard let identity = try await identities.find(whisperId: whisperId) else {
            throw WhisperHTTPError(.notFound, "no such identity")
        }
        let since = try Self.epoch(request.uri.queryParameters.get("since"), name: "since")
        var answer = KeysAnswer(
            whisperId: identity.whisperId, encPublicKey: Data(identity.encPublicKey).base64EncodedString(),
            signPublicKey: Data(identity.signPublicKey).base64EncodedString(), status: identity.banned ? "banned" : "active"
        )
        switch try await directory.lookup(whisperId: whisperId, since: since) {
        case .proven(let proof): answer.proof = proof
        case .waiting: answer.waiting = true
        }
        return try JSONResponse.make(encoding: answer, cacheControl: "private, no-cache")
    }

    /// What `GET /users/{id}/keys` answers: the keys, and the directory's proof of them
    /// (or `waiting` while the identity is not in an epoch yet).
    struct KeysAnswer: Encodable {
        var whisperId: String
        var encPublicKey: String
        var signPublicKey: String
        var status: String
        var proof: KeyProof?
        var waiting: Bool?
    }

    /// What `GET /kt/head` answers.
    struct HeadAnswer: Encodable {
        var head: DirectoryHead
        var consistency: KeyProof.Consistency?
        /// The configured auditors' newest signatures, each with the head it names (absent
        /// when there are none).
        var audits: [AuditedHead]?
    }

    /// `POST /kt/audits`: the body one ``AuditorSignature``, by a key of
    /// `AUTH_KT_AUDITOR_KEYS` (else 403), of a published epoch with the signed log root
    /// and signed within 10 minutes of this server's clock (else 400). Kept when it is the
    /// auditor's newest (`recorded`); an older one is not kept.
    private func recordAudit(_ request: Request) async throws -> Bool {
        let body = try await request.body.collect(upTo: 4_096)
        guard let object = try? JSONSerialization.jsonObject(with: Data(buffer: body)) as? [String: Any],
              Set(object.keys) == AuditorSignature.fieldNames,
              let audit = try? JSONDecoder().decode(AuditorSignature.self, from: Data(buffer: body)) else {
            throw WhisperHTTPError(.invalidPayload, "the body must be {auditorKeyId, epoch, logRoot, signedAt, signature}")
        }
        guard let key = settings.auditorKeys.first(where: { Ed25519.keyId($0) == audit.auditorKeyId }) else {
            throw WhisperHTTPError(.forbidden, "not a key of an auditor this server takes (AUTH_KT_AUDITOR_KEYS)")
        }
        guard audit.isSigned(by: key) else { throw WhisperHTTPError(.authFailed, "the signature does not verify with the auditor's key") }
        guard abs(Clock.millisecondsNow() - audit.signedAt) <= Int64(Limits.TIMESTAMP_SKEW_MS) else {
            throw WhisperHTTPError(.invalidTimestamp, "signedAt is more than \(Limits.TIMESTAMP_SKEW_MS / 60_000) minutes from the server's clock")
        }
        guard let head = try await directory.head(epoch: audit.epoch), audit.isOf(head) else {
            throw WhisperHTTPError(.invalidPayload, "the directory published no epoch \(audit.epoch) with that log root")
        }
        guard try await directory.record(audit) else { return false }
        logger.info("kt_audit_recorded", metadata: ["auditor": "\(audit.auditorKeyId)", "epoch": "\(audit.epoch)"])
        return true
    }

    private func consistency(since: Int64?, head: DirectoryHead) async throws -> KeyProof.Consistency? {
        guard let since, since < head.epoch else { return nil }
        return KeyProof.Consistency(fromEpoch: since, hashes: try await directory.consistency(from: since, to: head.epoch))
    }

    /// An epoch number from a query or path: nil when absent, 400 when not a positive integer.
    static func epoch(_ text: String?, name: String) throws -> Int64? {
        guard let text else { return nil }
        guard text.count <= 18, text.allSatisfy(\.isASCII), let epoch = Int64(text), epoch > 0 else {
            throw WhisperHTTPError(.invalidPayload, "\(name) must be a positive integer (an epoch)")
        }
        return epoch
    }

    private func authenticate(_ request: Request) async throws -> SessionRecord {
        try await sessions.authenticate(request)
    }
}
