import WhisperShared

/// Settings of auth (docs/configuration.md lists each variable).
public struct AuthSettings: ServiceSettings {
    public static let serviceName = "auth"
    public static let defaultPort = 8081
    public var common: CommonSettings
    /// Shared with the gateway; guards the internal frame endpoints.
    public var internalToken: String
    public var registerPerIP: RateLimitRule
    public var registerPerIdentity: RateLimitRule
    public var updateTokensPerIdentity: RateLimitRule
    public var updateTokensPerIP: RateLimitRule
    public var keyLookupPerIdentity: RateLimitRule

    public init(
        common: CommonSettings,
        internalToken: String,
        registerPerIP: RateLimitRule = RateLimitRule("30/60s")!,
        registerPerIdentity: RateLimitRule = RateLimitRule("10/60s")!,
        updateTokensPerIdentity: RateLimitRule = RateLimitRule("10/60s")!,
        updateTokensPerIP: RateLimitRule = RateLimitRule("60/60s")!,
        keyLookupPerIdentity: RateLimitRule = RateLimitRule("120/60s")!
    ) {
        self.common = common
        self.internalToken = internalToken
        self.registerPerIP = registerPerIP
        self.registerPerIdentity = registerPerIdentity
        self.updateTokensPerIdentity = updateTokensPerIdentity
        self.updateTokensPerIP = updateTokensPerIP
        self.keyLookupPerIdentity = keyLookupPerIdentity
    }

    public init(from settings: SettingsReader) {
        common = CommonSettings(service: Self.serviceName, defaultPort: Self.defaultPort, from: settings)
        internalToken = settings.requiredString("whisper.internal.token", secret: true)
        if !internalToken.isEmpty, internalToken.utf8.count < 32 {
            settings.reject("whisper.internal.token", because: "must be at least 32 characters")
        }
        func rule(_ key: String, _ fallback: String) -> RateLimitRule {
            let text = settings.string(key, default: fallback)
            guard let rule = RateLimitRule(text) else {
                settings.reject(key, because: "must look like 20/60s (count/period with s, m or h)")
                return RateLimitRule(fallback)!
            }
            return rule
        }
        registerPerIP = rule("auth.rate.limit.register.per.ip", "30/60s")
        registerPerIdentity = rule("auth.rate.limit.register.per.identity", "10/60s")
        updateTokensPerIdentity = rule("auth.rate.limit.update.tokens.per.identity", "10/60s")
        updateTokensPerIP = rule("auth.rate.limit.update.tokens.per.ip", "60/60s")
        keyLookupPerIdentity = rule("auth.rate.limit.key.lookup.per.identity", "120/60s")
    }
}
