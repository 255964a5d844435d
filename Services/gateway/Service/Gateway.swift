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
        sessions: SessionStore(redis: environment.redis),
        presence: presence,
        sendPerSender: settings.sendPerSender,
        controlPerAddress: LocalBucketTable(rule: settings.controlPerAddress),
        refusalsPerAddress: LocalBucketTable(rule: settings.refusalsPerAddress)
    )
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

    let webSocketRouter = Router(context: GatewayRequestContext.self)
    webSocketRouter.ws("/ws") { _, _ in
        draining.isDraining ? .dontUpgrade : .upgrade([:])
    } onUpgrade: { inbound, outbound, context in
        let connection = ClientConnection(
            channel: context.requestContext.channel, outbound: outbound,
            remoteAddress: context.requestContext.remoteAddress, logger: context.logger,
            controlLimit: settings.controlPerSocket, refusalLimit: settings.refusalsPerSocket
        )
        connections.add(connection)
        // Oversize frames and the like end the loop with an error: the WebSocket layer
        // closes with its code. Either way the socket gives up its identity (presence)
        // before it leaves the registry, in this task: a frame for it that arrives
        // meanwhile still finds it, and nothing is left running after the socket.
        let ended: (any Error)? = await withTaskGroup(of: Void.self) { group in
            group.addTask { await connection.runClosing() }
            defer { connection.finishClosing() }
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
        server: .http1WebSocketUpgrade(
            webSocketRouter: webSocketRouter,
            configuration: .init(ws: .init(
                maxFrameSize: Limits.MAX_WS_FRAME_BYTES,
                autoPing: .enabled(timePeriod: settings.pingInterval),
                closeTimeout: settings.drainTimeout
            ))
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
    let assembly = ServiceAssembly(
        services: environment.clientServices + [subscriber, settler, keeper, app, drainer],
        logger: environment.logger,
        gracePeriod: settings.common.shutdownGracePeriod
    )
    return GatewayHandle(assembly: assembly, environment: environment, connections: connections)
}
