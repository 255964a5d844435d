import Foundation
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOCore
import ServiceLifecycle
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
    let frames = FrameHandler(
        environment: environment,
        auth: ServiceClient(baseURL: settings.authURL, internalToken: settings.internalToken),
        turnCred: settings.turnCredURL.isEmpty ? nil : ServiceClient(baseURL: settings.turnCredURL, internalToken: settings.internalToken),
        sessions: SessionStore(redis: environment.redis),
        presence: presence,
        limits: FrameLimits(settings: settings, redis: environment.redis, metrics: environment.metrics),
        receipts: ReceiptDesk(redis: environment.redis, metrics: environment.metrics, receiptsWaitingMax: settings.receiptsWaitingMax),
        typing: TypingDesk(redis: environment.redis, metrics: environment.metrics),
        watching: PresenceDesk(
            redis: environment.redis, instanceID: settings.common.instanceID, eventsPerIdentity: settings.presenceEventsPerIdentity,
            metrics: environment.metrics
        )
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
    let settler = ReceiptSettler(receipts: ReceiptQueue(redis: environment.redis), logger: environment.logger)
    let control = ControlChannel(connections: connections, settler: settler, metrics: environment.metrics, logger: environment.logger)
    let subscriber = RedisSubscriber(
        configuration: settings.common.redis,
        channels: [RedisKeys.gatewayChannel(settings.common.instanceID)],
        logger: environment.logger,
        onMessage: control.handle
    )

    let router = Router(context: GatewayRequestContext.self)
    router.add(middleware: HTTPMetricsMiddleware(metrics: environment.metrics))
    let subscribed = ReadinessCheck(name: "redis_subscriber") {
        subscriber.isSubscribed ? .ok : .failed("not subscribed to this instance's channel")
    }
    OperationsRoutes(environment: environment, readiness: Readiness(checks: environment.standardReadinessChecks + [subscribed]), draining: draining)
        .register(on: router)
    // Reached by a GET /ws that was not upgraded: the reason, as an HTTP status.
    router.get("/ws") { request, context -> Response in
        if let refusal = UpgradeRefusal.origin(of: request, allowed: settings.allowedOrigins) { throw refusal }
        if draining.isDraining {
            throw HTTPError(.serviceUnavailable, headers: [.retryAfter: "1"], message: "this gateway is shutting down; connect again")
        }
        if let refusal = admission.refusal(for: context.remoteAddress) { throw refusal }
        throw HTTPError(.badRequest, message: "a WebSocket upgrade is required here")
    }

    let webSocketRouter = Router(context: GatewayRequestContext.self)
    webSocketRouter.ws("/ws") { request, context in
        // A refused upgrade goes on to the HTTP router, whose /ws route says why.
        guard !draining.isDraining, UpgradeRefusal.origin(of: request, allowed: settings.allowedOrigins) == nil else { return .dontUpgrade }
        return admission.admit(context.remoteAddress, channel: context.channel) == .admitted ? .upgrade([:]) : .dontUpgrade
    } onUpgrade: { inbound, outbound, context in
        await HandshakeDeadline.lift(on: context.requestContext.channel)
        let connection = ClientConnection(
            channel: context.requestContext.channel, outbound: outbound,
            remoteAddress: context.requestContext.remoteAddress, logger: context.logger,
            controlLimit: settings.controlPerSocket, refusalLimit: settings.refusalsPerSocket,
            maxUnsentBytes: settings.maxUnsentBytes
        )
        connections.add(connection)
        // Oversize frames and the like end the loop with an error: the WebSocket layer
        // closes with its code. Either way the socket gives up its identity (presence)
        // before it leaves the registry, in this task: a frame for it that arrives
        // meanwhile still finds it, and nothing is left running after the socket.
        let ended: (any Error)? = await withTaskGroup(of: Void.self) { group in
            group.addTask { await connection.runClosing() }
            group.addTask { await connection.enforceAuthentication(within: settings.authenticationDeadline) }
            defer {
                connection.finishClosing()
                group.cancelAll()
            }
            do {
                for try await message in inbound.messages(maxSize: Limits.MAX_WS_FRAME_BYTES) {
                    let bytes: [UInt8] = switch message {
                    case .text(let text): Array(text.utf8)
                    case .binary(let buffer): Array(buffer.readableBytesView)
                    }
                    await frames.handle(bytes, on: connection)
                }
                return nil
            } catch {
                return error
            }
        }
        await frames.release(connection)
        connections.remove(connection.id)
        if let ended { throw ended }
    }

    let app = Application(
        router: router,
        server: .guardedWebSocketUpgrade(
            webSocketRouter: webSocketRouter,
            configuration: .init(ws: .init(
                maxFrameSize: Limits.MAX_WS_FRAME_BYTES,
                autoPing: .enabled(timePeriod: settings.pingInterval),
                closeTimeout: settings.drainTimeout
            )),
            handshakeTimeout: settings.handshakeTimeout,
            connectionCap: connectionCap
        ),
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
        services: refusals + environment.clientServices + [subscriber, settler, keeper, app, drainer],
        logger: environment.logger,
        gracePeriod: settings.common.shutdownGracePeriod
    )
    return GatewayHandle(assembly: assembly, environment: environment, connections: connections)
}
