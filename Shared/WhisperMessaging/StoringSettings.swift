import WhisperProtocol
import WhisperShared

/// Settings of the services that store messages (gateways and routers fill the same
/// queues): one variable sets both (`WHISPER_PENDING_MAX_MESSAGES`, ...), a service's older
/// name still read and logged as one to rename. Their pair limit is `Limit.sendPerPair`.
public struct StoringSettings: Sendable, Equatable {
    /// What one recipient's pending queue may hold.
    public var pendingCapacity: PendingQueue.Capacity
    /// How long a cached identity's ban status is trusted (signing keys stay for good).
    public var identityCacheTTL: Duration
    /// How long a Whisper ID that names nobody is remembered as unknown.
    public var unknownIdentityTTL: Duration

    public static let standard = StoringSettings(
        pendingCapacity: .standard, identityCacheTTL: .seconds(30), unknownIdentityTTL: .seconds(10)
    )

    public init(pendingCapacity: PendingQueue.Capacity, identityCacheTTL: Duration, unknownIdentityTTL: Duration) {
        self.pendingCapacity = pendingCapacity
        self.identityCacheTTL = identityCacheTTL
        self.unknownIdentityTTL = unknownIdentityTTL
    }

    /// Reads `whisper.<name>`, else `<service>.<name>` (the older, per-service name).
    public init(from settings: SettingsReader, service: String) {
        func key(_ name: String) -> String {
            settings.key("whisper." + name, olderNames: [service + "." + name])
        }
        let standard = Self.standard
        let strangers = settings.int(key("pending.strangers.percent"), default: standard.pendingCapacity.strangersPercent, range: 1...100)
        pendingCapacity = PendingQueue.Capacity(
            messages: settings.int(key("pending.max.messages"), default: standard.pendingCapacity.messages, range: 1...1_000_000),
            bytes: settings.int(key("pending.max.bytes"), default: standard.pendingCapacity.bytes, range: Limits.MAX_STORED_MESSAGE_BYTES...(1 << 34)),
            strangersPercent: strangers,
            perStrangerPercent: settings.int(
                key("pending.per.stranger.percent"), default: standard.pendingCapacity.perStrangerPercent, range: 1...strangers
            )
        )
        identityCacheTTL = .seconds(settings.int(key("identity.cache.seconds"), default: 30, range: 0...3_600))
        unknownIdentityTTL = .seconds(settings.int(key("unknown.identity.cache.seconds"), default: 10, range: 0...3_600))
    }
}
