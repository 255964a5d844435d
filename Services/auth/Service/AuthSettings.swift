import WhisperShared

/// Settings of auth (docs/configuration.md lists each variable).
public struct AuthSettings: ServiceSettings {
    public static let serviceName = "auth"
    public static let defaultPort = 8081
    public var common: CommonSettings
    /// Shared with the gateway; guards the internal frame endpoints.
    public var internalToken: String
    /// The token being rotated out, still accepted (`WHISPER_INTERNAL_TOKEN_PREVIOUS`).
    public var previousInternalToken: String?
    /// Where the internal frame endpoints (`/internal/v1/...`, called by gateways)
    /// listen: a port apart from the public one (key lookup, health, metrics).
    public var internalHTTP: HTTPSettings
    public static let defaultInternalPort = 8091
    public var registerPerIP: RateLimitRule
    /// Successful proofs for one identity (charged only after the proof verified, so
    /// nobody can use up another identity's bucket by naming it).
    public var registerPerIdentity: RateLimitRule
    public var updateTokensPerIdentity: RateLimitRule
    public var updateTokensPerIP: RateLimitRule
    public var keyLookupPerIdentity: RateLimitRule
    /// Contacts backup reads, writes and deletes per identity.
    public var backupPerIdentity: RateLimitRule
    /// `report_user` frames per reporting identity.
    public var reportPerIdentity: RateLimitRule
    /// Device rows kept per identity, the active one included: older ones are deleted at
    /// the next sign-in (each sign-in on a new install adds one). Devices that are not
    /// active keep no push or VoIP token.
    public var devicesKeptPerIdentity = AuthSettings.defaultDevicesKept
    public static let defaultDevicesKept = 5

    public init(
        common: CommonSettings,
        internalToken: String,
        internalHTTP: HTTPSettings = HTTPSettings(host: "127.0.0.1", port: AuthSettings.defaultInternalPort),
        registerPerIP: RateLimitRule = RateLimitRule(capacity: 30, period: .seconds(60)),
        registerPerIdentity: RateLimitRule = RateLimitRule(capacity: 10, period: .seconds(60)),
        updateTokensPerIdentity: RateLimitRule = RateLimitRule(capacity: 10, period: .seconds(60)),
        updateTokensPerIP: RateLimitRule = RateLimitRule(capacity: 60, period: .seconds(60)),
        keyLookupPerIdentity: RateLimitRule = RateLimitRule(capacity: 120, period: .seconds(60)),
        backupPerIdentity: RateLimitRule = RateLimitRule(capacity: 60, period: .seconds(60)),
        reportPerIdentity: RateLimitRule = RateLimitRule(capacity: 20, period: .seconds(3_600))
    ) {
        self.reportPerIdentity = reportPerIdentity
        self.backupPerIdentity = backupPerIdentity
        self.common = common
        self.internalToken = internalToken
        self.internalHTTP = internalHTTP
        self.registerPerIP = registerPerIP
        self.registerPerIdentity = registerPerIdentity
        self.updateTokensPerIdentity = updateTokensPerIdentity
        self.updateTokensPerIP = updateTokensPerIP
        self.keyLookupPerIdentity = keyLookupPerIdentity
    }

    public init(from settings: SettingsReader) {
        common = CommonSettings(service: Self.serviceName, defaultPort: Self.defaultPort, from: settings)
        (internalToken, internalHTTP) = settings.internalEndpoint(service: Self.serviceName, defaultPort: Self.defaultInternalPort, public: common)
        previousInternalToken = settings.previousInternalToken()
        registerPerIP = settings.rateLimit("auth.rate.limit.register.per.ip", default: "30/60s")
        registerPerIdentity = settings.rateLimit("auth.rate.limit.register.per.identity", default: "10/60s")
        updateTokensPerIdentity = settings.rateLimit("auth.rate.limit.update.tokens.per.identity", default: "10/60s")
        updateTokensPerIP = settings.rateLimit("auth.rate.limit.update.tokens.per.ip", default: "60/60s")
        keyLookupPerIdentity = settings.rateLimit("auth.rate.limit.key.lookup.per.identity", default: "120/60s")
        backupPerIdentity = settings.rateLimit("auth.rate.limit.backup.per.identity", default: "60/60s")
        reportPerIdentity = settings.rateLimit("auth.rate.limit.report.per.identity", default: "20/1h")
        devicesKeptPerIdentity = settings.int("auth.devices.kept.per.identity", default: Self.defaultDevicesKept, range: 1...100)
    }
}

extension AuthSettings: RedactedDescription {}
