import WhisperMessaging
import WhisperShared

/// Settings of the gateway (docs/configuration.md lists each variable). Each default is
/// written once, at its property (rate limits: in `Limit.registry`); the reader starts
/// from them.
public struct GatewaySettings: ServiceSettings {
    public static let serviceName = "gateway"
    public static let defaultPort = 8080
    public var common: CommonSettings
    /// Base URL of the auth service (its load-balanced address).
    public var authURL: String
    /// Shared with the services the gateway calls; guards their internal endpoints.
    public var internalToken: String
    /// The token being rotated out (`WHISPER_INTERNAL_TOKEN_PREVIOUS`): listener-device
    /// cookies made under it are still accepted, and renewed by the listener page.
    public var previousInternalToken: String?
    /// The keys push-to-talk floor grants are signed with (`GATEWAY_FLOOR_KEYS`): held
    /// by gateways only, derived from nothing else.
    public var floorKeys: FloorKeys
    /// The rate limits the gateway charges (`Limit.registry`, the `gateway.` ones), and
    /// the pair limit it shares with the routers for the messages it stores itself.
    public var limits = LimitRules()
    /// Interval of WebSocket pings from the server; a peer that misses one is dropped.
    public var pingInterval: Duration = .seconds(30)
    /// How long a draining gateway waits for sockets to close after telling clients to reconnect.
    public var drainTimeout: Duration = .seconds(5)
    /// What clients are told to wait before reconnecting when this instance drains.
    public var reconnectDelayMs = 1_000
    /// A connection must complete its WebSocket upgrade within this long after it opens
    /// (slow or missing headers); plain HTTP connections (health, metrics) are closed
    /// this long after they open.
    public var handshakeTimeout: Duration = .seconds(10)
    /// A socket must hold a session (register, or use a session token) within this long
    /// after its upgrade, else it is closed with 4004.
    public var authenticationDeadline: Duration = .seconds(60)
    /// Open sockets on this instance, and from one client address; past either an
    /// upgrade is answered 503 or 429, with `Retry-After`.
    public var maxSockets = 50_000
    public var maxSocketsPerAddress = 200
    /// TCP connections of any kind open at once on this instance; past it a new one is
    /// closed on accept. 0: what the process's open-file limit allows, less 512 kept
    /// for everything else (the socket cap is lowered to match when it is higher).
    public var maxConnections = 0
    /// Bytes handed to a socket while it has no room in its send buffer before it
    /// counts as not reading and is dropped.
    public var maxUnsentBytes = 8 * 1_048_576
    /// When not empty, an upgrade whose `Origin` header names another origin is refused
    /// (403); requests without `Origin` (native apps) are always accepted.
    public var allowedOrigins: [String] = []
    /// Backpressure: while the router stream holds this many entries not yet handled,
    /// `send_message` is refused with `RATE_LIMITED` (`fetch_pending` at twice as many:
    /// it finishes work, and refusing it first would grow the queues; receipts never
    /// enter the stream).
    /// The routers' lag stays about this many entries; 0 turns it off.
    public var routerBacklogMax = 2_000
    /// The retry hint given with such a refusal.
    public var busyRetryMs = 1_000
    /// Receipts (`message_delivered`) that wait for one offline sender; past it the
    /// oldest are dropped. The gateway serves receipts, so it keeps them.
    public var receiptsWaitingMax = OwedFrames.standardCapacity
    /// Live text (docs/protocol.md section 13): listeners one conversation keeps (let in
    /// by its Whisperer, in Postgres); sockets waiting in or listening to one
    /// conversation at once (all gateways).
    public var liveMaxListeners = 50
    public var liveMaxSockets = 100
    /// Push-to-talk (docs/protocol.md section 14): members per channel (media goes peer
    /// to peer); the longest one grant of the floor lasts; members waiting for it.
    public var pttMaxMembers = 12
    public var pttMaxTalk: Duration = .seconds(60)
    public var pttMaxQueue = 11
    /// How long a channel stays announced nearby after its owner's last heartbeat.
    public var pttAnnounceTTL: Duration = .seconds(30)
    /// How often the presence of this instance's sockets is renewed (it expires after
    /// `PresenceStore.ttl` without a renewal, so a dead instance's sockets stop counting).
    public var presenceRefreshInterval: Duration = PresenceStore.ttl / 3
    /// Base URL of turn-cred's internal port, which serves `get_turn_credentials`
    /// (empty: the frame is answered `FORBIDDEN`, TURN is not offered).
    public var turnCredURL = ""
    /// For the messages this gateway stores itself (`send_message`), the settings it shares
    /// with the routers (`StoringSettings`, read from the same `WHISPER_…` variables):
    /// what one recipient's queue may hold, how long identities stay cached.
    public var pendingCapacity = StoringSettings.standard.pendingCapacity
    public var identityCacheTTL = StoringSettings.standard.identityCacheTTL
    public var unknownIdentityTTL = StoringSettings.standard.unknownIdentityTTL
    /// Backpressure on `send_message`: one that waited in its socket's queue longer
    /// than this before the gateway came to it is refused with
    /// `RATE_LIMITED` "the server is busy" (not counted against the socket), so past
    /// capacity the wait of an admitted message stays near this bound; 0 turns it off.
    public var sendWaitMax: Duration = .milliseconds(100)
    /// A direct peer's message to a socket of this instance is
    /// written to it while its store is in flight (docs/architecture.md, "Delivered
    /// while it is stored"); off: every message waits for its store's reply.
    public var deliverWhileStoring = true
    /// The most tokens the gateway takes at once from an identity's bucket for messages
    /// or receipts, to spend on that identity's next frames without a
    /// round trip each (`TokenLease`); 1: a round trip per frame.
    public var leaseMax = 16
    /// How long a receipt's last step (its application to the recipient's queue) may
    /// wait to go to Redis with other work (`ReceiptApplier`); 0: at once, by itself.
    public var receiptApplyMaxWait: Duration = .milliseconds(2)
    /// How long the store of a message already delivered early may wait for other
    /// writes to share its trip to Redis and its fsync (group commit); 0: at once.
    public var storeGroupWait: Duration = .milliseconds(2)

    public init(common: CommonSettings, authURL: String, internalToken: String, floorKeys: FloorKeys) {
        self.common = common
        self.authURL = authURL
        self.internalToken = internalToken
        self.floorKeys = floorKeys
    }

    public init(from settings: SettingsReader) {
        self.init(
            common: CommonSettings(service: Self.serviceName, defaultPort: Self.defaultPort, from: settings),
            authURL: settings.string("gateway.auth.url", default: "http://127.0.0.1:8091"),
            internalToken: settings.requiredString("whisper.internal.token", secret: true),
            // Without keys the settings are invalid and the gateway does not start
            // (`validate()`); the stand-in only completes the value.
            floorKeys: settings.floorKeys() ?? FloorKeys(seeds: [Array(repeating: 0, count: Ed25519.seedBytes)])
        )
        if !(authURL.hasPrefix("http://") || authURL.hasPrefix("https://")) {
            settings.reject("gateway.auth.url", because: "must be an http:// or https:// URL")
        }
        previousInternalToken = settings.previousInternalToken()
        limits = LimitRules(from: settings, service: Self.serviceName, shared: [.sendPerPair])
        pingInterval = settings.seconds("gateway.ws.ping.interval.seconds", default: pingInterval, range: 5...300)
        drainTimeout = settings.seconds("gateway.drain.timeout.seconds", default: drainTimeout, range: 0...120)
        reconnectDelayMs = settings.int("gateway.reconnect.delay.ms", default: reconnectDelayMs, range: 0...60_000)
        presenceRefreshInterval = settings.seconds("gateway.presence.refresh.seconds", default: presenceRefreshInterval, range: 1...60)
        handshakeTimeout = settings.seconds("gateway.handshake.timeout.seconds", default: handshakeTimeout, range: 1...300)
        authenticationDeadline = settings.seconds("gateway.auth.deadline.seconds", default: authenticationDeadline, range: 5...3_600)
        maxSockets = settings.int("gateway.max.sockets", default: maxSockets, range: 1...10_000_000)
        maxSocketsPerAddress = settings.int("gateway.max.sockets.per.address", default: maxSocketsPerAddress, range: 1...1_000_000)
        maxConnections = settings.int("gateway.max.connections", default: maxConnections, range: 0...10_000_000)
        maxUnsentBytes = settings.int("gateway.max.unsent.bytes", default: maxUnsentBytes, range: 65_536...(1 << 30))
        allowedOrigins = settings.list("gateway.allowed.origins", default: allowedOrigins)
        routerBacklogMax = settings.int("gateway.router.backlog.max", default: routerBacklogMax, range: 0...1_000_000)
        busyRetryMs = settings.int("gateway.busy.retry.ms", default: busyRetryMs, range: 1...60_000)
        receiptsWaitingMax = settings.int("gateway.receipts.waiting.max", default: receiptsWaitingMax, range: 1...1_000_000)
        liveMaxListeners = settings.int("gateway.live.max.listeners", default: liveMaxListeners, range: 1...10_000)
        liveMaxSockets = settings.int("gateway.live.max.sockets", default: liveMaxSockets, range: 2...100_000)
        pttMaxMembers = settings.int("gateway.ptt.max.members", default: pttMaxMembers, range: 2...1_000)
        pttMaxTalk = settings.seconds("gateway.ptt.max.talk.seconds", default: pttMaxTalk, range: 1...3_600)
        pttMaxQueue = settings.int("gateway.ptt.max.queue", default: pttMaxQueue, range: 0...1_000)
        pttAnnounceTTL = settings.seconds("gateway.ptt.announce.ttl.seconds", default: pttAnnounceTTL, range: 1...600)
        let storing = StoringSettings(from: settings, service: Self.serviceName)
        pendingCapacity = storing.pendingCapacity
        identityCacheTTL = storing.identityCacheTTL
        unknownIdentityTTL = storing.unknownIdentityTTL
        leaseMax = settings.int("gateway.rate.limit.lease.max", default: leaseMax, range: 1...1_000)
        receiptApplyMaxWait = settings.milliseconds("gateway.receipt.apply.max.wait.ms", default: receiptApplyMaxWait, range: 0...1_000)
        storeGroupWait = settings.milliseconds("gateway.store.group.wait.ms", default: storeGroupWait, range: 0...100)
        sendWaitMax = settings.milliseconds("gateway.send.wait.max.ms", default: sendWaitMax, range: 0...60_000)
        deliverWhileStoring = settings.bool("gateway.deliver.while.storing", default: deliverWhileStoring)
        turnCredURL = settings.string("gateway.turn.cred.url", default: turnCredURL)
        if !turnCredURL.isEmpty, !(turnCredURL.hasPrefix("http://") || turnCredURL.hasPrefix("https://")) {
            settings.reject("gateway.turn.cred.url", because: "must be empty or an http:// or https:// URL")
        }
    }
}

extension GatewaySettings: RedactedDescription {}
