import Foundation
import WhisperShared

/// Settings of push-sender (docs/configuration.md lists each variable). Either provider
/// may be left unconfigured: its wake-ups then end in the dead-letter stream with the
/// reason `provider_not_configured`, and the other provider works as usual.
public struct PushSenderSettings: ServiceSettings {
    public static let serviceName = "push-sender"
    public static let defaultPort = 8083
    public var common: CommonSettings
    public var apns: APNsSettings?
    public var fcm: FCMSettings?
    /// PEM file of extra certificate authorities the providers' TLS certificates may
    /// chain to, besides the system's (a test's own CA, a TLS-intercepting proxy).
    public var extraTrustRootsPath: String?
    /// At most one message wake-up per identity in this window, while the device has
    /// not connected since the last one (calls are never held back).
    public var coalesceWindow: Duration
    /// Attempts per wake-up before it goes to the dead-letter stream.
    public var maxAttempts: Int
    /// The first retry's delay; each next one doubles, up to `retryMaximum`, with jitter.
    public var retryInitial: Duration
    public var retryMaximum: Duration
    /// Requests in flight per provider, at most (the rest wait in the stream).
    public var inFlightPerProvider: Int
    /// Jobs read from the stream at a time.
    public var batchSize: Int
    /// How long a job may stay unacknowledged by its push-sender before another claims it.
    public var claimAfter: Duration
    /// How long a message wake-up may wait at the provider for an offline device.
    public var messageTTL: Duration
    /// The same for a call (a call that rings later than this is over).
    public var callTTL: Duration
    /// The longest a provider request may take before it counts as failed (and is retried).
    public var requestTimeout: Duration

    public struct APNsSettings: Sendable {
        /// The `.p8` signing key (PEM, PKCS#8 P-256), its key ID and the team ID.
        public var keyPEM: String
        public var keyID: String
        public var teamID: String
        /// The app's bundle ID: `apns-topic` of message wake-ups; calls use `<topic>.voip`.
        public var topic: String
        /// `https://api.push.apple.com` (production) or `https://api.sandbox.push.apple.com`
        /// (development builds), or another base URL (a test's stand-in).
        public var baseURL: String

        public init(keyPEM: String, keyID: String, teamID: String, topic: String, baseURL: String) {
            self.keyPEM = keyPEM
            self.keyID = keyID
            self.teamID = teamID
            self.topic = topic
            self.baseURL = baseURL
        }
    }

    public struct FCMSettings: Sendable {
        /// The service account (the JSON file Firebase gives): project, client email,
        /// private key and the token URI its access tokens come from.
        public var serviceAccount: ServiceAccount
        /// `https://fcm.googleapis.com`, or a test's stand-in.
        public var baseURL: String

        public init(serviceAccount: ServiceAccount, baseURL: String) {
            self.serviceAccount = serviceAccount
            self.baseURL = baseURL
        }
    }

    public struct ServiceAccount: Sendable, Decodable {
        public var projectID: String
        public var clientEmail: String
        public var privateKeyPEM: String
        public var tokenURI: String

        enum CodingKeys: String, CodingKey {
            case projectID = "project_id"
            case clientEmail = "client_email"
            case privateKeyPEM = "private_key"
            case tokenURI = "token_uri"
        }

        public init(projectID: String, clientEmail: String, privateKeyPEM: String, tokenURI: String) {
            self.projectID = projectID
            self.clientEmail = clientEmail
            self.privateKeyPEM = privateKeyPEM
            self.tokenURI = tokenURI
        }
    }

    public init(
        common: CommonSettings, apns: APNsSettings? = nil, fcm: FCMSettings? = nil, extraTrustRootsPath: String? = nil,
        coalesceWindow: Duration = .seconds(60), maxAttempts: Int = 8,
        retryInitial: Duration = .seconds(1), retryMaximum: Duration = .seconds(300),
        inFlightPerProvider: Int = 256, batchSize: Int = 100, claimAfter: Duration = .seconds(30),
        messageTTL: Duration = .seconds(86_400), callTTL: Duration = .seconds(60), requestTimeout: Duration = .seconds(15)
    ) {
        self.common = common
        self.apns = apns
        self.fcm = fcm
        self.extraTrustRootsPath = extraTrustRootsPath
        self.coalesceWindow = coalesceWindow
        self.maxAttempts = maxAttempts
        self.retryInitial = retryInitial
        self.retryMaximum = retryMaximum
        self.inFlightPerProvider = inFlightPerProvider
        self.batchSize = batchSize
        self.claimAfter = claimAfter
        self.messageTTL = messageTTL
        self.callTTL = callTTL
        self.requestTimeout = requestTimeout
    }

    public init(from settings: SettingsReader) {
        common = CommonSettings(service: Self.serviceName, defaultPort: Self.defaultPort, from: settings)
        extraTrustRootsPath = settings.optionalString("push.tls.extra.roots")
        coalesceWindow = .seconds(settings.int("push.coalesce.window.seconds", default: 60, range: 0...86_400))
        maxAttempts = settings.int("push.max.attempts", default: 8, range: 1...100)
        retryInitial = .milliseconds(settings.int("push.retry.initial.ms", default: 1_000, range: 10...600_000))
        retryMaximum = .milliseconds(settings.int("push.retry.max.ms", default: 300_000, range: 10...86_400_000))
        inFlightPerProvider = settings.int("push.inflight.per.provider", default: 256, range: 1...10_000)
        batchSize = settings.int("push.batch.size", default: 100, range: 1...5_000)
        claimAfter = .milliseconds(settings.int("push.claim.after.ms", default: 30_000, range: 500...3_600_000))
        messageTTL = .seconds(settings.int("push.message.ttl.seconds", default: 86_400, range: 0...2_419_200))
        callTTL = .seconds(settings.int("push.call.ttl.seconds", default: 60, range: 0...3_600))
        requestTimeout = .seconds(settings.int("push.request.timeout.seconds", default: 15, range: 1...300))

        if let keyPath = settings.optionalString("push.apns.key.path") {
            let environment = settings.string("push.apns.environment", default: "production")
            let standardURL = environment == "sandbox" ? "https://api.sandbox.push.apple.com" : "https://api.push.apple.com"
            if environment != "sandbox" && environment != "production" {
                settings.reject("push.apns.environment", because: "must be production or sandbox")
            }
            let pem = (try? String(contentsOfFile: keyPath, encoding: .utf8)) ?? ""
            if pem.isEmpty { settings.reject("push.apns.key.path", because: "cannot read \(keyPath)") }
            apns = APNsSettings(
                keyPEM: pem, keyID: settings.requiredString("push.apns.key.id"), teamID: settings.requiredString("push.apns.team.id"),
                topic: settings.requiredString("push.apns.topic"), baseURL: settings.string("push.apns.url", default: standardURL)
            )
        } else {
            apns = nil
        }
        if let accountPath = settings.optionalString("push.fcm.service.account.path") {
            let data = (try? Data(contentsOf: URL(fileURLWithPath: accountPath))) ?? Data()
            if let account = try? JSONDecoder().decode(ServiceAccount.self, from: data) {
                fcm = FCMSettings(serviceAccount: account, baseURL: settings.string("push.fcm.url", default: "https://fcm.googleapis.com"))
            } else {
                settings.reject("push.fcm.service.account.path", because: "cannot read a service account (project_id, client_email, private_key, token_uri) from \(accountPath)")
                fcm = nil
            }
        } else {
            fcm = nil
        }
    }
}

// Printed without keys: service descriptions reach debug logs (swift-service-lifecycle).
extension PushSenderSettings.APNsSettings: CustomStringConvertible, CustomDebugStringConvertible {
    public var description: String { "APNsSettings(key \(keyID), team \(teamID), topic \(topic), \(baseURL))" }
    public var debugDescription: String { description }
}

extension PushSenderSettings.ServiceAccount: CustomStringConvertible, CustomDebugStringConvertible {
    public var description: String { "ServiceAccount(\(clientEmail), project \(projectID))" }
    public var debugDescription: String { description }
}

extension PushSenderSettings: RedactedDescription {}
extension PushSenderSettings.APNsSettings: RedactedDescription {}
extension PushSenderSettings.FCMSettings: RedactedDescription {}
extension PushSenderSettings.ServiceAccount: RedactedDescription {}
