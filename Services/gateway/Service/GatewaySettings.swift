import WhisperMessaging
import WhisperShared

/// Settings of the gateway (docs/configuration.md lists each variable).
public struct GatewaySettings: ServiceSettings {
    public static let serviceName = "gateway"
    public static let defaultPort = 8080
    public var common: CommonSettings
    /// Interval of WebSocket pings from the server; a peer that misses one is dropped.
    public var pingInterval: Duration
    /// How long a draining gateway waits for sockets to close after telling clients to reconnect.
    public var drainTimeout: Duration
    /// What clients are told to wait before reconnecting when this instance drains.
    public var reconnectDelayMs: Int
    /// Base URL of the auth service (its load-balanced address).
    public var authURL: String
    /// Shared with the services the gateway calls; guards their internal endpoints.
    public var internalToken: String
    /// The token being rotated out (`WHISPER_INTERNAL_TOKEN_PREVIOUS`): listener-device
    /// cookies made under it are still accepted, and renewed by the listener page.
    public var previousInternalToken: String?
    /// `send_message` frames one identity may send (charged as the frame enters the router stream).
    public var sendPerSender: RateLimitRule
    /// Frames that do no work beyond the gateway and auth (`ping`, `session_refresh`,
    /// `logout`), per socket and per client address (this instance's count). Past
    /// them: `RATE_LIMITED`, and the frame counts as refused.
    public var controlPerSocket: RateLimitRule
    public var controlPerAddress: RateLimitRule
    /// `session_refresh`, `logout` and `update_tokens` per identity, all gateways together (Redis).
    public var controlPerIdentity: RateLimitRule
    /// Refused frames (malformed, no live session, over a limit), per socket and per
    /// client address (this instance's count). Past them the socket is closed with 4003.
    public var refusalsPerSocket: RateLimitRule
    public var refusalsPerAddress: RateLimitRule
    /// `delivery_receipt` and `fetch_pending` frames one identity may send (charged, like
    /// `sendPerSender`, in the script that adds the entry to the router stream).
    public var receiptsPerIdentity: RateLimitRule
    public var fetchPerIdentity: RateLimitRule
    /// Frames for the routers (messages, receipts, fetches together) from one client
    /// address, this instance's count; checked in memory before anything reaches Redis.
    public var routedPerAddress: RateLimitRule
    /// A connection must complete its WebSocket upgrade within this long after it opens
    /// (slow or missing headers); plain HTTP connections (health, metrics) are closed
    /// this long after they open.
    public var handshakeTimeout: Duration
    /// A socket must hold a session (register, or use a session token) within this long
    /// after its upgrade, else it is closed with 4004.
    public var authenticationDeadline: Duration
    /// Open sockets on this instance, and from one client address; past either an
    /// upgrade is answered 503 or 429, with `Retry-After`.
    public var maxSockets: Int
    public var maxSocketsPerAddress: Int
    /// TCP connections of any kind open at once on this instance; past it a new one is
    /// closed on accept. 0: what the process's open-file limit allows, less 512 kept
    /// for everything else (the socket cap is lowered to match when it is higher).
    public var maxConnections: Int
    /// Bytes handed to a socket while it has no room in its send buffer before it
    /// counts as not reading and is dropped.
    public var maxUnsentBytes: Int
    /// When not empty, an upgrade whose `Origin` header names another origin is refused
    /// (403); requests without `Origin` (native apps) are always accepted.
    public var allowedOrigins: [String]
    /// Backpressure: while the router stream holds this many entries not yet handled,
    /// `send_message` is refused with `RATE_LIMITED` (`fetch_pending` at twice as many:
    /// it finishes work, and refusing it first would grow the queues; receipts never
    /// enter the stream).
    /// The routers' lag stays about this many entries; 0 turns it off.
    public var routerBacklogMax: Int
    /// The retry hint given with such a refusal.
    public var busyRetryMs: Int
    /// Receipts (`message_delivered`) that wait for one offline sender; past it the
    /// oldest are dropped. The gateway serves receipts, so it keeps them.
    public var receiptsWaitingMax: Int
    /// `group_create` and `group_update` per identity (all gateways, charged as the
    /// frame enters the router stream) and per client address (this instance's count).
    public var groupOpsPerIdentity: RateLimitRule
    public var groupOpsPerAddress: RateLimitRule
    /// `presence_subscribe` frames per identity (all gateways).
    public var presenceSubscribePerIdentity: RateLimitRule
    /// Live-text conversation frames (create, rename, delete, list) per identity.
    public var liveConversationsPerIdentity = RateLimitRule(capacity: 30, period: .seconds(60))
    /// Live text (docs/protocol.md section 13): listeners one conversation keeps (let in
    /// by its Whisperer, in Postgres); sockets waiting in or listening to one
    /// conversation at once (all gateways); `live_listen_offer` frames one conversation
    /// receives (all gateways); packets a Whisperer sends (per socket: one identity has
    /// one device); frames of one listener socket in one conversation.
    public var liveMaxListeners = 50
    public var liveMaxSockets = 100
    public var liveOffersPerConversation = RateLimitRule(capacity: 30, period: .seconds(60))
    public var livePacketsPerWhisperer = RateLimitRule(capacity: 200, period: .seconds(5))
    public var liveFramesPerListener = RateLimitRule(capacity: 30, period: .seconds(10))
    /// Push-to-talk (docs/protocol.md section 14): members per channel (media goes peer
    /// to peer); the longest one grant of the floor lasts; members waiting for it; the
    /// channel and floor frames of one identity (Redis bucket).
    public var pttMaxMembers = 12
    public var pttMaxTalk: Duration = .seconds(60)
    public var pttMaxQueue = 11
    public var pttPerIdentity = RateLimitRule(capacity: 120, period: .seconds(60))
    /// `ptt_signal` frames per identity (offers, answers and ICE candidates to every member).
    public var pttSignalsPerIdentity = RateLimitRule(capacity: 600, period: .seconds(60))
    /// How long a channel stays announced nearby after its owner's last heartbeat.
    public var pttAnnounceTTL: Duration = .seconds(30)
    /// Presence events (online, offline) one identity's comings and goings may cause;
    /// past it they are not sent (a reconnect loop does not flood its peers).
    public var presenceEventsPerIdentity: RateLimitRule
    /// How often the presence of this instance's sockets is renewed (it expires after
    /// `PresenceStore.ttl` without a renewal, so a dead instance's sockets stop counting).
    public var presenceRefreshInterval: Duration
    /// `call_initiate` frames per identity (all gateways), and the other signaling
    /// frames of calls (`call_answer`, `call_ice_candidate`, `call_end`) together.
    public var callsPerIdentity: RateLimitRule
    public var callSignalsPerIdentity: RateLimitRule
    /// Base URL of turn-cred's internal port, which serves `get_turn_credentials`
    /// (empty: the frame is answered `FORBIDDEN`, TURN is not offered).
    public var turnCredURL: String
    /// How `send_message` is served: `direct` (this gateway checks, verifies and stores
    /// it and answers itself; no router on its path) or `router` (through the router
    /// stream, like group copies, group changes, calls and fetches).
    public var sendPath: SendPath = .direct
    /// For the messages this gateway stores itself (`direct`), the settings it shares
    /// with the routers (`StoringSettings`, read from the same `WHISPER_…` variables):
    /// messages from one sender to one recipient, what one recipient's queue may hold,
    /// how long identities stay cached.
    public var sendPerPair = StoringSettings.standard.sendPerPair
    public var pendingCapacity = StoringSettings.standard.pendingCapacity
    public var identityCacheTTL = StoringSettings.standard.identityCacheTTL
    public var unknownIdentityTTL = StoringSettings.standard.unknownIdentityTTL
    /// Backpressure on the direct path: a `send_message` that waited in its socket's
    /// queue longer than this before the gateway came to it is refused with
    /// `RATE_LIMITED` "the server is busy" (not counted against the socket), so past
    /// capacity the wait of an admitted message stays near this bound; 0 turns it off.
    public var sendWaitMax: Duration = .milliseconds(100)

    /// The most tokens the gateway takes at once from an identity's bucket for messages
    /// (direct path) or receipts, to spend on that identity's next frames without a
    /// round trip each (`TokenLease`); 1: a round trip per frame.
    public var leaseMax = 16

    /// How long a receipt's last step (its application to the recipient's queue) may
    /// wait to go to Redis with other work (`ReceiptApplier`); 0: at once, by itself.
    public var receiptApplyMaxWait: Duration = .milliseconds(2)

    public enum SendPath: String, Sendable {
        case direct, router
    }

    public init(
        common: CommonSettings, authURL: String, internalToken: String,
        pingInterval: Duration = .seconds(30), drainTimeout: Duration = .seconds(5), reconnectDelayMs: Int = 1_000,
        sendPerSender: RateLimitRule = RateLimitRule(capacity: 600, period: .seconds(60)),
        controlPerSocket: RateLimitRule = RateLimitRule(capacity: 30, period: .seconds(60)),
        controlPerAddress: RateLimitRule = RateLimitRule(capacity: 600, period: .seconds(60)),
        refusalsPerSocket: RateLimitRule = RateLimitRule(capacity: 20, period: .seconds(60)),
        refusalsPerAddress: RateLimitRule = RateLimitRule(capacity: 200, period: .seconds(60)),
        presenceRefreshInterval: Duration = PresenceStore.ttl / 3,
        receiptsPerIdentity: RateLimitRule = RateLimitRule(capacity: 6_000, period: .seconds(60)),
        fetchPerIdentity: RateLimitRule = RateLimitRule(capacity: 120, period: .seconds(60)),
        routedPerAddress: RateLimitRule = RateLimitRule(capacity: 12_000, period: .seconds(60)),
        handshakeTimeout: Duration = .seconds(10),
        authenticationDeadline: Duration = .seconds(60),
        maxSockets: Int = 50_000,
        maxSocketsPerAddress: Int = 200,
        maxConnections: Int = 0,
        maxUnsentBytes: Int = 8 * 1_048_576,
        allowedOrigins: [String] = [],
        controlPerIdentity: RateLimitRule = RateLimitRule(capacity: 60, period: .seconds(60)),
        routerBacklogMax: Int = 2_000,
        busyRetryMs: Int = 1_000,
        receiptsWaitingMax: Int = OwedFrames.standardCapacity,
        groupOpsPerIdentity: RateLimitRule = RateLimitRule(capacity: 30, period: .seconds(60)),
        groupOpsPerAddress: RateLimitRule = RateLimitRule(capacity: 120, period: .seconds(60)),
        presenceSubscribePerIdentity: RateLimitRule = RateLimitRule(capacity: 30, period: .seconds(60)),
        presenceEventsPerIdentity: RateLimitRule = RateLimitRule(capacity: 12, period: .seconds(60)),
        callsPerIdentity: RateLimitRule = RateLimitRule(capacity: 20, period: .seconds(60)),
        callSignalsPerIdentity: RateLimitRule = RateLimitRule(capacity: 600, period: .seconds(60)),
        turnCredURL: String = ""
    ) {
        self.callsPerIdentity = callsPerIdentity
        self.callSignalsPerIdentity = callSignalsPerIdentity
        self.turnCredURL = turnCredURL
        self.groupOpsPerIdentity = groupOpsPerIdentity
        self.groupOpsPerAddress = groupOpsPerAddress
        self.presenceSubscribePerIdentity = presenceSubscribePerIdentity
        self.presenceEventsPerIdentity = presenceEventsPerIdentity
        self.receiptsWaitingMax = receiptsWaitingMax
        self.routerBacklogMax = routerBacklogMax
        self.busyRetryMs = busyRetryMs
        self.controlPerIdentity = controlPerIdentity
        self.receiptsPerIdentity = receiptsPerIdentity
        self.fetchPerIdentity = fetchPerIdentity
        self.routedPerAddress = routedPerAddress
        self.handshakeTimeout = handshakeTimeout
        self.authenticationDeadline = authenticationDeadline
        self.maxSockets = maxSockets
        self.maxSocketsPerAddress = maxSocketsPerAddress
        self.maxConnections = maxConnections
        self.maxUnsentBytes = maxUnsentBytes
        self.allowedOrigins = allowedOrigins
        self.common = common
        self.authURL = authURL
        self.internalToken = internalToken
        self.pingInterval = pingInterval
        self.drainTimeout = drainTimeout
        self.reconnectDelayMs = reconnectDelayMs
        self.sendPerSender = sendPerSender
        self.controlPerSocket = controlPerSocket
        self.controlPerAddress = controlPerAddress
        self.refusalsPerSocket = refusalsPerSocket
        self.refusalsPerAddress = refusalsPerAddress
        self.presenceRefreshInterval = presenceRefreshInterval
    }

    public init(from settings: SettingsReader) {
        common = CommonSettings(service: Self.serviceName, defaultPort: Self.defaultPort, from: settings)
        pingInterval = .seconds(settings.int("gateway.ws.ping.interval.seconds", default: 30, range: 5...300))
        drainTimeout = .seconds(settings.int("gateway.drain.timeout.seconds", default: 5, range: 0...120))
        reconnectDelayMs = settings.int("gateway.reconnect.delay.ms", default: 1_000, range: 0...60_000)
        authURL = settings.string("gateway.auth.url", default: "http://127.0.0.1:8091")
        if !(authURL.hasPrefix("http://") || authURL.hasPrefix("https://")) {
            settings.reject("gateway.auth.url", because: "must be an http:// or https:// URL")
        }
        internalToken = settings.requiredString("whisper.internal.token", secret: true)
        previousInternalToken = settings.previousInternalToken()
        sendPerSender = settings.rateLimit("gateway.rate.limit.send.per.sender", default: "600/60s")
        controlPerSocket = settings.rateLimit("gateway.rate.limit.control.per.socket", default: "30/60s")
        controlPerAddress = settings.rateLimit("gateway.rate.limit.control.per.address", default: "600/60s")
        controlPerIdentity = settings.rateLimit("gateway.rate.limit.control.per.identity", default: "60/60s")
        refusalsPerSocket = settings.rateLimit("gateway.rate.limit.refusals.per.socket", default: "20/60s")
        refusalsPerAddress = settings.rateLimit("gateway.rate.limit.refusals.per.address", default: "200/60s")
        presenceRefreshInterval = .seconds(settings.int("gateway.presence.refresh.seconds", default: 30, range: 1...60))
        receiptsPerIdentity = settings.rateLimit("gateway.rate.limit.receipts.per.identity", default: "6000/60s")
        fetchPerIdentity = settings.rateLimit("gateway.rate.limit.fetch.per.identity", default: "120/60s")
        routedPerAddress = settings.rateLimit("gateway.rate.limit.routed.per.address", default: "12000/60s")
        handshakeTimeout = .seconds(settings.int("gateway.handshake.timeout.seconds", default: 10, range: 1...300))
        authenticationDeadline = .seconds(settings.int("gateway.auth.deadline.seconds", default: 60, range: 5...3_600))
        maxSockets = settings.int("gateway.max.sockets", default: 50_000, range: 1...10_000_000)
        maxSocketsPerAddress = settings.int("gateway.max.sockets.per.address", default: 200, range: 1...1_000_000)
        maxConnections = settings.int("gateway.max.connections", default: 0, range: 0...10_000_000)
        maxUnsentBytes = settings.int("gateway.max.unsent.bytes", default: 8 * 1_048_576, range: 65_536...(1 << 30))
        allowedOrigins = settings.list("gateway.allowed.origins", default: [])
        routerBacklogMax = settings.int("gateway.router.backlog.max", default: 2_000, range: 0...1_000_000)
        busyRetryMs = settings.int("gateway.busy.retry.ms", default: 1_000, range: 1...60_000)
        receiptsWaitingMax = settings.int("gateway.receipts.waiting.max", default: OwedFrames.standardCapacity, range: 1...1_000_000)
        groupOpsPerIdentity = settings.rateLimit("gateway.rate.limit.group.per.identity", default: "30/60s")
        groupOpsPerAddress = settings.rateLimit("gateway.rate.limit.group.per.address", default: "120/60s")
        presenceSubscribePerIdentity = settings.rateLimit("gateway.rate.limit.presence.subscribe.per.identity", default: "30/60s")
        liveConversationsPerIdentity = settings.rateLimit("gateway.rate.limit.live.conversations.per.identity", default: "30/60s")
        liveMaxListeners = settings.int("gateway.live.max.listeners", default: 50, range: 1...10_000)
        liveMaxSockets = settings.int("gateway.live.max.sockets", default: 100, range: 2...100_000)
        liveOffersPerConversation = settings.rateLimit("gateway.rate.limit.live.offers.per.conversation", default: "30/60s")
        livePacketsPerWhisperer = settings.rateLimit("gateway.rate.limit.live.packets.per.whisperer", default: "200/5s")
        liveFramesPerListener = settings.rateLimit("gateway.rate.limit.live.frames.per.listener", default: "30/10s")
        pttMaxMembers = settings.int("gateway.ptt.max.members", default: 12, range: 2...1_000)
        pttMaxTalk = .seconds(settings.int("gateway.ptt.max.talk.seconds", default: 60, range: 1...3_600))
        pttMaxQueue = settings.int("gateway.ptt.max.queue", default: 11, range: 0...1_000)
        pttPerIdentity = settings.rateLimit("gateway.rate.limit.ptt.per.identity", default: "120/60s")
        pttSignalsPerIdentity = settings.rateLimit("gateway.rate.limit.ptt.signal.per.identity", default: "600/60s")
        pttAnnounceTTL = .seconds(settings.int("gateway.ptt.announce.ttl.seconds", default: 30, range: 1...600))
        presenceEventsPerIdentity = settings.rateLimit("gateway.rate.limit.presence.events.per.identity", default: "12/60s")
        callsPerIdentity = settings.rateLimit("gateway.rate.limit.call.per.identity", default: "20/60s")
        callSignalsPerIdentity = settings.rateLimit("gateway.rate.limit.call.signal.per.identity", default: "600/60s")
        let path = settings.string("gateway.send.path", default: "direct")
        if let known = SendPath(rawValue: path) {
            sendPath = known
        } else {
            settings.reject("gateway.send.path", because: "must be direct or router")
        }
        let storing = StoringSettings(from: settings, service: Self.serviceName)
        sendPerPair = storing.sendPerPair
        pendingCapacity = storing.pendingCapacity
        identityCacheTTL = storing.identityCacheTTL
        unknownIdentityTTL = storing.unknownIdentityTTL
        leaseMax = settings.int("gateway.rate.limit.lease.max", default: 16, range: 1...1_000)
        receiptApplyMaxWait = .milliseconds(settings.int("gateway.receipt.apply.max.wait.ms", default: 2, range: 0...1_000))
        sendWaitMax = .milliseconds(settings.int("gateway.send.wait.max.ms", default: 100, range: 0...60_000))
        turnCredURL = settings.string("gateway.turn.cred.url", default: "")
        if !turnCredURL.isEmpty, !(turnCredURL.hasPrefix("http://") || turnCredURL.hasPrefix("https://")) {
            settings.reject("gateway.turn.cred.url", because: "must be empty or an http:// or https:// URL")
        }
    }
}

extension GatewaySettings: RedactedDescription {}
