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
    let limiter: RateLimiter
    let settings: AuthSettings
    let metrics: ServiceMetrics
    let logger: Logger

    /// What clients reach through the load balancer.
    func registerPublic(on router: Router<BasicRequestContext>) {
        router.get("/users/:whisperId/keys") { request, context in
            try await keys(request, context)
        }
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

    /// `GET /users/{whisperId}/keys` (spec 3.6).
    private func keys(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let caller = try await authenticate(request)
        guard let whisperId = context.parameters.get("whisperId"), Format.isWhisperID(whisperId) else {
            throw WhisperHTTPError(.invalidPayload, "whisperId must be a Whisper ID (WSP-XXXX-XXXX-XXXX)")
        }
        try await limiter.chargeRequest(.keyLookupPerIdentity, key: caller.whisperId, rules: settings.limits)
        guard let identity = try await identities.find(whisperId: whisperId) else {
            throw WhisperHTTPError(.notFound, "no such identity")
        }
        let body: [String: String] = [
            "whisperId": identity.whisperId,
            "encPublicKey": Data(identity.encPublicKey).base64EncodedString(),
            "signPublicKey": Data(identity.signPublicKey).base64EncodedString(),
            "status": identity.banned ? "banned" : "active",
        ]
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        headers[.cacheControl] = "private, max-age=300"
        let data = try JSONSerialization.data(withJSONObject: body, options: [.sortedKeys, .withoutEscapingSlashes])
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    private func authenticate(_ request: Request) async throws -> SessionRecord {
        try await sessions.authenticate(request)
    }
}
