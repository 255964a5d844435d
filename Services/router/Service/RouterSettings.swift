import WhisperMessaging
import WhisperShared

/// Settings of router (docs/configuration.md lists each variable).
public struct RouterSettings: ServiceSettings {
    public static let serviceName = "router"
    public static let defaultPort = 8082
    public var common: CommonSettings
    /// The rate limits the router charges (`Limit.registry`, the `router.` ones, and the
    /// pair limit of messages it shares with gateways, `Limit.sendPerPair`).
    public var limits = LimitRules()
    /// What one recipient's pending queue may hold (messages, and bytes of stored messages).
    public var pendingCapacity: PendingQueue.Capacity
    /// Receipts that may wait for one sender who is offline; past it the oldest go.
    public var receiptsWaitingMax: Int
    /// How long an unknown Whisper ID is remembered as unknown (no Postgres query for it meanwhile).
    public var unknownIdentityTTL: Duration
    /// Entries read from the stream at a time.
    public var batchSize: Int
    /// How long an entry may stay unacknowledged by its consumer before another router claims it.
    public var claimAfter: Duration
    /// How long a cached identity's ban status is trusted.
    public var identityCacheTTL: Duration
    /// Handled entries ride on the next read's write; those that finish while the read
    /// waits on an idle stream are acknowledged by themselves this long after.
    public var ackInterval: Duration
    /// After a read that did not fill a batch, the next read waits until this long after
    /// the last one began (0, the default: read again at once, so batches come from
    /// load alone). A linger trades latency for fewer reads at low load.
    public var readLinger: Duration
    /// How long a call rings before the server ends it (`timeout`, or `unavailable` when
    /// the callee's device was never reached).
    public var callRingTimeout: Duration
    /// How long an answered call's state lives without a signal on it (each one extends it).
    public var callAnsweredTTL: Duration
    /// How often a router looks for calls whose ring timeout has passed.
    public var callSweepInterval: Duration
    /// Open group invitations kept per invitee (from identities that are not its direct
    /// peers); past it the oldest are withdrawn. Invitations also lapse after 30 days.
    public var groupInvitationsPerIdentity = RouterSettings.defaultGroupInvitationsPerIdentity
    public static let defaultGroupInvitationsPerIdentity = 50
    /// Group events (`group_created`, `group_updated`) that wait for one offline member,
    /// in a store of their own; past it the oldest are dropped.
    public var groupEventsWaitingMax = OwedFrames.standardGroupEventsCapacity

    public init(
        common: CommonSettings,
        pendingCapacity: PendingQueue.Capacity = .standard,
        receiptsWaitingMax: Int = OwedFrames.standardCapacity,
        unknownIdentityTTL: Duration = .seconds(10),
        batchSize: Int = 200,
        claimAfter: Duration = .seconds(10),
        identityCacheTTL: Duration = .seconds(30),
        ackInterval: Duration = .milliseconds(50),
        readLinger: Duration = .zero,
        callRingTimeout: Duration = .seconds(45),
        callAnsweredTTL: Duration = .seconds(86_400),
        callSweepInterval: Duration = .seconds(1)
    ) {
        self.common = common
        self.pendingCapacity = pendingCapacity
        self.receiptsWaitingMax = receiptsWaitingMax
        self.unknownIdentityTTL = unknownIdentityTTL
        self.batchSize = batchSize
        self.claimAfter = claimAfter
        self.identityCacheTTL = identityCacheTTL
        self.ackInterval = ackInterval
        self.readLinger = readLinger
        self.callRingTimeout = callRingTimeout
        self.callAnsweredTTL = callAnsweredTTL
        self.callSweepInterval = callSweepInterval
    }

    public init(from settings: SettingsReader) {
        common = CommonSettings(service: Self.serviceName, defaultPort: Self.defaultPort, from: settings)
        let storing = StoringSettings(from: settings, service: Self.serviceName)
        limits = LimitRules(from: settings, service: Self.serviceName, shared: [.sendPerPair])
        pendingCapacity = storing.pendingCapacity
        receiptsWaitingMax = settings.int("router.receipts.waiting.max", default: OwedFrames.standardCapacity, range: 1...1_000_000)
        unknownIdentityTTL = storing.unknownIdentityTTL
        batchSize = settings.int("router.batch.size", default: 200, range: 1...5_000)
        claimAfter = .milliseconds(settings.int("router.claim.after.ms", default: 10_000, range: 500...600_000))
        identityCacheTTL = storing.identityCacheTTL
        ackInterval = .milliseconds(settings.int("router.ack.interval.ms", default: 50, range: 0...1_000))
        readLinger = .milliseconds(settings.int("router.read.linger.ms", default: 0, range: 0...100))
        callRingTimeout = .seconds(settings.int("router.call.ring.timeout.seconds", default: 45, range: 1...600))
        callAnsweredTTL = .seconds(settings.int("router.call.answered.ttl.seconds", default: 86_400, range: 60...604_800))
        callSweepInterval = .milliseconds(settings.int("router.call.sweep.interval.ms", default: 1_000, range: 50...60_000))
        groupInvitationsPerIdentity = settings.int(
            "router.group.invitations.per.identity", default: Self.defaultGroupInvitationsPerIdentity, range: 1...1_000
        )
        groupEventsWaitingMax = settings.int("router.group.events.waiting.max", default: groupEventsWaitingMax, range: 1...1_000_000)
    }
}
