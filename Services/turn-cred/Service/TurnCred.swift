import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Synchronization
import WhisperShared

/// Settings of turn-cred (docs/configuration.md lists each variable).
public struct TurnCredSettings: ServiceSettings {
    public static let serviceName = "turn-cred"
    public static let defaultPort = 8085
    public static let defaultInternalPort = 8095
    public var common: CommonSettings
    /// Shared with the gateway; guards the internal frame endpoint.
    public var internalToken: String
    /// The token being rotated out, still accepted (`WHISPER_INTERNAL_TOKEN_PREVIOUS`).
    public var previousInternalToken: String?
    /// Where the internal frame endpoint (`get_turn_credentials` from gateways) listens.
    public var internalHTTP: HTTPSettings
    /// coturn's shared secrets (`static-auth-secret`), newest first: new credentials are
    /// signed with the first; coturn is configured with all of them while a rotation
    /// runs, so credentials signed with an older one keep working until they expire.
    public var secrets: [String]
    /// The TURN and STUN URLs handed to clients (`turn:`, `turns:`, `stun:`).
    public var urls: [String]
    /// How long a credential is good for. coturn cannot revoke a REST-API credential, so
    /// this is how long a banned identity can still relay: one hour by default (a call
    /// that outlives it gets new credentials with an ICE restart).
    public var ttl: Duration
    public static let defaultTTLSeconds = 3_600
    /// The rate limit turn-cred charges (`Limit.turnPerIdentity`).
    public var limits = LimitRules()

    public init(
        common: CommonSettings, internalToken: String, secrets: [String], urls: [String],
        internalHTTP: HTTPSettings = HTTPSettings(host: "127.0.0.1", port: TurnCredSettings.defaultInternalPort),
        ttl: Duration = .seconds(TurnCredSettings.defaultTTLSeconds)
    ) {
        self.common = common
        self.internalToken = internalToken
        self.internalHTTP = internalHTTP
        self.secrets = secrets
        self.urls = urls
        self.ttl = ttl
    }

    public init(from settings: SettingsReader) {
        common = CommonSettings(service: Self.serviceName, defaultPort: Self.defaultPort, from: settings)
        (internalToken, internalHTTP) = settings.internalEndpoint(service: Self.serviceName, defaultPort: Self.defaultInternalPort, public: common)
        previousInternalToken = settings.previousInternalToken()
        secrets = settings.list("turn.cred.secrets", default: [], secret: true)
        if secrets.isEmpty {
            settings.reject("turn.cred.secrets", because: "is required: coturn's static-auth-secret (a comma-separated list, newest first)")
        } else if secrets.contains(where: { $0.utf8.count < 16 }) {
            settings.reject("turn.cred.secrets", because: "every secret must be at least 16 characters")
        }
        urls = settings.list("turn.cred.urls", default: [])
        if urls.isEmpty {
            settings.reject("turn.cred.urls", because: "is required: the TURN/STUN URLs clients use (turn:host:3478?transport=udp, ...)")
        } else if let bad = urls.first(where: { !TurnCredentialMint.isTurnURL($0) }) {
            settings.reject("turn.cred.urls", because: "\(bad) does not start with turn:, turns: or stun:")
        }
        ttl = .seconds(settings.int("turn.cred.ttl.seconds", default: Self.defaultTTLSeconds, range: 60...604_800))
        limits = LimitRules(from: settings, service: Self.serviceName)
    }
}

/// Credentials in coturn's REST-API scheme (`use-auth-secret`): the username is
/// `<expiry unix seconds>:<whisperId>` and the password base64(HMAC-SHA1(secret,
/// username)). coturn recomputes the password from the username with each secret it
/// is configured with, and refuses a username whose expiry has passed.
public struct TurnCredentialMint: Sendable {
    public let secret: String
    public let urls: [String]
    public let ttl: Duration

    public init(secret: String, urls: [String], ttl: Duration) {
        self.secret = secret
        self.urls = urls
        self.ttl = ttl
    }

    public func credentials(for whisperId: String, now milliseconds: Int64 = Clock.millisecondsNow()) -> TurnCredentials {
        let seconds = Int64(ttl.components.seconds)
        let expiry = milliseconds / 1000 + seconds
        let username = "\(expiry):\(whisperId)"
        return TurnCredentials(
            urls: urls, username: username, credential: Self.password(for: username, secret: secret),
            ttlSeconds: Int(seconds), expiresAt: expiry * 1000
        )
    }

    public static func password(for username: String, secret: String) -> String {
        let mac = HMAC<Insecure.SHA1>.authenticationCode(for: Array(username.utf8), using: SymmetricKey(data: Array(secret.utf8)))
        return Data(mac).base64EncodedString()
    }

    static func isTurnURL(_ url: String) -> Bool {
        ["turn:", "turns:", "stun:"].contains { url.hasPrefix($0) } && url.utf8.count <= 512
    }
}

/// Assembles one turn-cred instance: `POST /v1/turn/credentials` (a session token as
/// bearer) on the public port, `get_turn_credentials` from gateways on the internal one.
public func buildTurnCred(
    settings: TurnCredSettings, logger: Logger, onServerRunning: (@Sendable (Int) async -> Void)? = nil,
    onInternalServerRunning: (@Sendable (Int) async -> Void)? = nil
) -> HTTPServiceHandle {
    let shared = Mutex<TurnCredRoutes?>(nil)
    return buildHTTPService(
        settings: settings.common,
        logger: logger,
        routes: { router, environment in
            let routes = TurnCredRoutes(
                mint: TurnCredentialMint(secret: settings.secrets.first ?? "", urls: settings.urls, ttl: settings.ttl),
                sessions: SessionStore(redis: environment.redis), limiter: RateLimiter(redis: environment.redis),
                settings: settings, metrics: environment.metrics, logger: environment.logger
            )
            routes.registerPublic(on: router)
            shared.withLock { $0 = routes }
        },
        internalListener: InternalListener(http: settings.internalHTTP, onServerRunning: onInternalServerRunning) { router, _ in
            shared.withLock { $0 }?.registerInternal(on: router)
        },
        startupProblems: (settings.internalToken.isEmpty ? ["the internal token (WHISPER_INTERNAL_TOKEN) is empty"] : [])
            + (settings.secrets.isEmpty ? ["no TURN secret (TURN_CRED_SECRETS)"] : [])
            + (settings.urls.isEmpty ? ["no TURN URL (TURN_CRED_URLS)"] : []),
        onServerRunning: onServerRunning
    )
}

struct TurnCredRoutes: Sendable {
    let mint: TurnCredentialMint
    let sessions: SessionStore
    let limiter: RateLimiter
    let settings: TurnCredSettings
    let metrics: ServiceMetrics
    let logger: Logger

    func registerPublic(on router: Router<ClientRequestContext>) {
        let issued = metrics.counter("turn_credentials_issued", help: "TURN credentials handed out (WebSocket and HTTP).", labels: [("via", "http")])
        router.post("/v1/turn/credentials") { request, _ -> Response in
            let session = try await sessions.authenticate(request)
            let credentials: TurnCredentials
            do {
                credentials = try await issue(for: session.whisperId)
            } catch let refusal as WhisperError {
                var headers = HTTPFields()
                if refusal.code == .rateLimited { headers[.retryAfter] = "60" }
                throw WhisperHTTPError(refusal.code, refusal.message, headers: headers)
            }
            issued.increment()
            var headers = HTTPFields()
            headers[.contentType] = "application/json"
            headers[.cacheControl] = "no-store"
            let body = try ProtocolJSON.encoder.encode(credentials)
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
        }
    }

    func registerInternal(on router: Router<BasicRequestContext>) {
        let issued = metrics.counter("turn_credentials_issued", help: "TURN credentials handed out (WebSocket and HTTP).", labels: [("via", "ws")])
        InternalFrameEndpoints(internalToken: settings.internalToken, previousToken: settings.previousInternalToken, metrics: metrics, logger: logger)
            .register(GetTurnCredentials.self, on: router) { _, context in
                // The gateway checked the session and bound the socket to its identity.
                guard let whisperId = context.whisperId else {
                    throw WhisperError(.notRegistered, "no valid session for this connection; register first")
                }
                let credentials = try await issue(for: whisperId)
                issued.increment()
                return credentials
            }
    }

    private func issue(for whisperId: String) async throws -> TurnCredentials {
        try await limiter.charge(.turnPerIdentity, key: whisperId, rules: settings.limits)
        logger.debug("turn_credentials_issued", metadata: ["whisperId": "\(whisperId)"])
        return mint.credentials(for: whisperId)
    }
}

extension TurnCredentialMint: RedactedDescription {}
extension TurnCredSettings: RedactedDescription {}
