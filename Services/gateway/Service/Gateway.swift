import Foundation
import Hummingbird
import HTTPTypes
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import ServiceLifecycle
import WhisperMessaging
import WhisperShared

/// A running gateway instance as tests see it.
public struct GatewayHandle: Sendable {
    public let assembly: ServiceAssembly
    public let environment: ServiceEnvironment
    public let connections: ConnectionRegistry
}

/// Assembles a gateway: WebSocket endpoint at `/ws`, plus `/health`, `/ready` and
/// `/metrics`, on one port.
public func buildGateway(
    settings: GatewaySettings,
    logger: Logger,
    onServerRunning: (@Sendable (Int) async -> Void)? = nil
) -> GatewayHandle {
    let environment = ServiceEnvironment(settings: settings.common, logger: logger)
    let connections = ConnectionRegistry(metrics: environment.metrics)
    let draining = DrainFlag()
    let presence = PresenceStore(redis: environment.redis)
    let recentBans = RecentBans()
    let identities = IdentityCache(
        postgres: environment.postgres, logger: environment.logger, metrics: environment.metrics, ttl: settings.identityCacheTTL,
        unknownTTL: settings.unknownIdentityTTL
    )
    let receipts = ReceiptDesk(
        redis: environment.redis, metrics: environment.metrics, receiptsWaitingMax: settings.receiptsWaitingMax,
        applyMaxWait: settings.receiptApplyMaxWait, instanceID: settings.common.instanceID, connections: connections, presence: presence,
        logger: environment.logger
    )
    let liveRegistry = LiveRegistry()
    let liveDevices = LiveDevices(internalToken: settings.internalToken, previousToken: settings.previousInternalToken)
    let nearbyBoard = NearbyBoard(ttl: settings.pttAnnounceTTL, metrics: environment.metrics)
    let peers = PeerMemory()
    let control = ControlChannel(
        connections: connections, receipts: receipts, banned: recentBans, identities: identities, metrics: environment.metrics,
        live: liveRegistry, nearby: nearbyBoard, peers: peers, logger: environment.logger
    )
    let limits = FrameLimits(settings: settings, redis: environment.redis, metrics: environment.metrics)
    let ptt = PTTDesk(
        redis: environment.redis, postgres: environment.postgres,
        settings: PTTDesk.Settings(
            maxMembers: settings.pttMaxMembers, maxTalk: settings.pttMaxTalk, maxQueue: settings.pttMaxQueue, announceTTL: settings.pttAnnounceTTL
        ),
        floorKeys: settings.floorKeys, nearbyBoard: nearbyBoard, holds: FloorHolds(), touches: ChannelTouches(),
        checks: MessageChecks(identities: identities),
        instanceID: settings.common.instanceID,
        logger: environment.logger
    )
    let sessions = SessionStore(redis: environment.redis)
    let watching = PresenceDesk(
        redis: environment.redis, instanceID: settings.common.instanceID, eventsPerIdentity: settings.limits[.presenceEventsPerIdentity],
        metrics: environment.metrics
    )
    let binding = SessionBinding(
        sessions: sessions, recentBans: recentBans,
        presence: PresenceClaims(
            presence: presence, watching: watching, connections: connections, ptt: ptt, redis: environment.redis, instanceID: settings.common.instanceID
        )
    )
    let live = LiveRelay(
        redis: environment.redis, postgres: environment.postgres, profiles: LiveProfiles(postgres: environment.postgres, redis: environment.redis, logger: environment.logger),
        registry: liveRegistry, connections: connections, limiter: limits.limiter,
        limits: LiveRelay.Limits(maxListeners: settings.liveMaxListeners, maxSockets: settings.liveMaxSockets, rules: settings.limits),
        instanceID: settings.common.instanceID, logger: environment.logger
    )
    let routerStream = RouterStreamDesk(limits: limits, receipts: receipts, redis: environment.redis, instanceID: settings.common.instanceID)
    let frames = FrameHandler(
        environment: environment,
        binding: binding,
        forwarding: ServiceForwarding(
            auth: ServiceClient(baseURL: settings.authURL, internalToken: settings.internalToken),
            turnCred: settings.turnCredURL.isEmpty ? nil : ServiceClient(baseURL: settings.turnCredURL, internalToken: settings.internalToken),
            binding: binding, instanceID: settings.common.instanceID
        ),
        limits: limits,
        routerStream: routerStream,
        receipts: receipts,
        typing: TypingDesk(redis: environment.redis, metrics: environment.metrics),
        watching: watching,
        sends: SendDesk(
            sending: MessageSending(
                checks: MessageChecks(identities: identities), attachments: AttachmentRecipients(postgres: environment.postgres),
                pending: PendingQueue(redis: environment.redis, capacity: settings.pendingCapacity), redis: environment.redis,
                pairLimit: settings.limits[.sendPerPair], metrics: RoutingMetrics(metrics: environment.metrics, stream: false), peers: peers
            ),
            instanceID: settings.common.instanceID, connections: connections, control: control, receipts: receipts,
            deliversWhileStoring: settings.deliverWhileStoring, limits: limits, sendWaitMax: settings.sendWaitMax,
            storeGroupWait: settings.storeGroupWait
        ),
        deletions: AccountDeletionDesk(
            environment: environment, sessions: sessions, limits: limits, routerStream: routerStream, live: live, ptt: ptt
        ),
        live: live,
        ptt: ptt
    )
    let (connectionLimit, files) = ConnectionCap.limit(configured: settings.maxConnections)
    let connectionCap = ConnectionCap(limit: connectionLimit, metrics: environment.metrics)
    // Every socket is a connection: the socket cap never promises more than the descriptors allow.
    let socketLimit = min(settings.maxSockets, connectionLimit)
    if socketLimit < settings.maxSockets {
        environment.logger.notice("socket_cap_lowered", metadata: [
            "configured": "\(settings.maxSockets)", "effective": "\(socketLimit)", "openFileLimit": "\(files)",
        ])
    }
    let admission = SocketAdmission(maxTotal: socketLimit, maxPerAddress: settings.maxSocketsPerAddress)
    let missedFrames = MissedFrames(connections: connections, logger: environment.logger)
    let subscriber = RedisSubscriber(
        configuration: settings.common.redis,
        channels: [RedisKeys.gatewayChannel(settings.common.instanceID), IdentityChange.channel, NearbyBoard.channel, LiveProfiles.channel],
        logger: environment.logger,
        onMessage: control.handle,
        // Changes published while the subscription was down were missed.
        onSubscribed: {
            identities.forgetAll()
            recentBans.removeAll()
            missedFrames.subscribed()
        }
    )

    let router = Router(context: ClientRequestContext.self)
    router.add(middleware: HTTPMetricsMiddleware(metrics: environment.metrics))
    router.add(middleware: RequestBodyLimit())
    let subscribed = ReadinessCheck(name: "redis_subscriber") {
        subscriber.isSubscribed ? .ok : .failed("not subscribed to this instance's channel")
    }
    OperationsRoutes(environment: environment, readiness: Readiness(checks: environment.standardReadinessChecks + [subscribed]), draining: draining)
        .register(on: router)
    // Reached by a GET /ws that was not upgraded: the reason, as an HTTP status.
    // Refusals that do not depend on the socket counts: the upgrade and GET /ws check
    // them first, in this order.
    let refusedOutright: @Sendable (_ origin: String?) -> HTTPError? = { origin in
        UpgradeRefusal.origin(origin, allowed: settings.allowedOrigins)
            ?? (draining.isDraining ? UpgradeRefusal.draining : subscriber.isSubscribed ? nil : UpgradeRefusal.unsubscribed)
    }
    ListenPage(devices: liveDevices) { request, context in
        let client = context.clientAddress(of: request, trusted: settings.common.trustedProxies)
        return limits.take(.liveDevicesPerAddress, address: client)
    }.register(on: router)
    // The keys floor grants are signed with (docs/protocol.md section 14).
    let floorKeyBody = ByteBuffer(bytes: (try? JSONEncoder().encode(settings.floorKeys.listing)) ?? Data())
    router.get("/ptt/floor-key") { _, _ -> Response in
        Response(
            status: .ok, headers: [.contentType: "application/json", .cacheControl: "max-age=300"],
            body: .init(byteBuffer: floorKeyBody)
        )
    }
    // `account_delete` over HTTP (docs/protocol.md section 12).
    router.post("/account/delete") { request, context -> Response in
        let client = context.clientAddress(of: request, trusted: settings.common.trustedProxies)
        guard limits.take(.groupOpsPerAddress, address: client) else {
            throw WhisperHTTPError(.rateLimited, Limit.groupOpsPerAddress.refusal(retryAfterMs: nil))
        }
        return try await frames.deletions.serve(over: request, address: client)
    }
    router.get("/ws") { request, context -> Response in
        if let refusal = refusedOutright(request.headers[.origin]) { throw refusal }
        let client = context.clientAddress(of: request, trusted: settings.common.trustedProxies)
        if let refusal = admission.refusal(for: client) { throw refusal }
        throw HTTPError(.badRequest, message: "a WebSocket upgrade is required here")
    }

    // Made once and shared by every socket: a closure made per socket would copy what
    // it captures (the frame handler and its desks) into each socket's memory.
    let onMessage: SocketHandler.MessageHandler = { bytes, waitingSince, connection, handOver in
        await frames.handle(bytes, waitingSince: waitingSince, on: connection, handOver: handOver)
    }
    // Once the socket closed and what it sent was handled, it gives up its identity
    // (presence) and then leaves the registry: a frame for it that arrives meanwhile
    // still finds it, and nothing is left running after the socket.
    let onClosed: SocketHandler.Farewell = { connection in
        await frames.live.leaveAll(connection)
        await frames.ptt.floor.socketClosed(connection)
        await frames.binding.release(connection)
        connections.remove(connection.id)
    }
    let socketSettings = SocketHandler.Settings(
        pingInterval: TimeAmount(settings.pingInterval),
        closeTimeout: TimeAmount(settings.drainTimeout),
        authenticationDeadline: TimeAmount(settings.authenticationDeadline),
        maxMessageBytes: Limits.MAX_WS_FRAME_BYTES,
        holdsLivePlace: { liveRegistry.holdsAny($0.id) },
        readsPaused: environment.metrics.counter(
            "gateway_socket_reads_paused",
            help: "Times a socket's queue of frames not yet handled filled (16 frames or 1 MiB) and the gateway stopped reading it until it drained: its client sent faster than the gateway served it, and TCP held it back."
        ),
        onMessage: onMessage, onClosed: onClosed
    )
    let admit: @Sendable (HTTPRequestHead, any Channel, ConnectionCap.Hold) -> (address: String, refusal: HTTPError?, liveDevice: String?) = { head, channel, hold in
        let address = ClientAddress.of(channel, forwardedFor: head.headers["X-Forwarded-For"], trusted: settings.common.trustedProxies)
        guard head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first == "/ws" else {
            return (address, HTTPError(.notFound, message: "WebSockets are served at /ws"), nil)
        }
        if let refusal = refusedOutright(head.headers["origin"].first) { return (address, refusal, nil) }
        // A listener device (live text) comes with its cookie, from the gateway's own pages.
        let device = liveDevices.device(ofUpgrade: head.headers["origin"], host: head.headers["host"].first, cookieHeaders: head.headers["cookie"])
        return (address, SocketAdmission.answer(admission.admit(address, hold: hold)), device)
    }
    let terms = ClientConnection.Terms(
        logger: environment.logger, controlLimit: settings.limits[.controlPerSocket], refusalLimit: settings.limits[.refusalsPerSocket],
        maxUnsentBytes: settings.maxUnsentBytes
    )
    let upgraded: @Sendable (any Channel, String, String?) throws -> Void = { channel, address, device in
        let connection = ClientConnection(channel: channel, remoteAddress: address, terms: terms, liveDevice: device)
        connections.add(connection)
        try channel.pipeline.syncOperations.addHandler(
            SocketHandler(connection: connection, settings: socketSettings)
        )
    }

    let app = Application(
        router: router,
        server: HTTPServerBuilder { responder in
            GatewayServerChannel(
                responder: responder, handshakeTimeout: settings.handshakeTimeout, cap: connectionCap,
                admit: admit, upgraded: upgraded
            )
        },
        configuration: .init(
            address: .hostname(settings.common.http.host, port: settings.common.http.port),
            serverName: "whisper-gateway"
        ),
        onServerRunning: { channel in
            await onServerRunning?(channel.localAddress?.port ?? 0)
        },
        logger: environment.logger
    )
    // Listed after the server, so it is told to stop first: it drains the sockets
    // while the server still runs, then the server stops.
    let drainer = ConnectionDrainer(
        flag: draining, connections: connections, timeout: settings.drainTimeout,
        reconnectDelayMs: settings.reconnectDelayMs, logger: environment.logger
    )
    let keeper = PresenceKeeper(
        presence: presence, connections: connections, instanceID: settings.common.instanceID,
        interval: settings.presenceRefreshInterval, logger: environment.logger
    )
    let refusals: [any Service] = settings.internalToken.isEmpty
        ? [RefuseToStart(problems: ["the internal token (WHISPER_INTERNAL_TOKEN) is empty"])] : []
    let assembly = ServiceAssembly(
        services: refusals + environment.clientServices + [
            subscriber, receipts.settler, receipts.applier, keeper,
            FloorKeeper.periodic(desk: ptt.floor, logger: environment.logger),
            ChannelTouches.periodic(desk: ptt.channels, logger: environment.logger),
            LiveKeeper.periodic(
                registry: liveRegistry, redis: environment.redis, instanceID: settings.common.instanceID,
                interval: .seconds(30), logger: environment.logger
            ),
            app, drainer,
        ],
        logger: environment.logger,
        gracePeriod: settings.common.shutdownGracePeriod
    )
    return GatewayHandle(assembly: assembly, environment: environment, connections: connections)
}
