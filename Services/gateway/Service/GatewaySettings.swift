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
    /// `send_message` frames one identity may send (charged as the frame enters the router stream).
    public var sendPerSender: RateLimitRule

    public init(
        common: CommonSettings, authURL: String, internalToken: String,
        pingInterval: Duration = .seconds(30), drainTimeout: Duration = .seconds(5), reconnectDelayMs: Int = 1_000,
        sendPerSender: RateLimitRule = RateLimitRule("600/60s")!
    ) {
        self.common = common
        self.authURL = authURL
        self.internalToken = internalToken
        self.pingInterval = pingInterval
        self.drainTimeout = drainTimeout
        self.reconnectDelayMs = reconnectDelayMs
        self.sendPerSender = sendPerSender
    }

    public init(from settings: SettingsReader) {
        common = CommonSettings(service: Self.serviceName, defaultPort: Self.defaultPort, from: settings)
        pingInterval = .seconds(settings.int("gateway.ws.ping.interval.seconds", default: 30, range: 5...300))
        drainTimeout = .seconds(settings.int("gateway.drain.timeout.seconds", default: 5, range: 0...120))
        reconnectDelayMs = settings.int("gateway.reconnect.delay.ms", default: 1_000, range: 0...60_000)
        authURL = settings.string("gateway.auth.url", default: "http://127.0.0.1:8081")
        if !(authURL.hasPrefix("http://") || authURL.hasPrefix("https://")) {
            settings.reject("gateway.auth.url", because: "must be an http:// or https:// URL")
        }
        internalToken = settings.requiredString("whisper.internal.token", secret: true)
        sendPerSender = settings.rateLimit("gateway.rate.limit.send.per.sender", default: "600/60s")
    }
}
