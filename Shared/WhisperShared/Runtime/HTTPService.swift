import Hummingbird
import Logging
import ServiceLifecycle

/// A service instance that serves HTTP: the environment (clients, metrics, logger)
/// and what to run.
public struct HTTPServiceHandle: Sendable {
    public let assembly: ServiceAssembly
    public let environment: ServiceEnvironment
}

/// Assembles a service that answers HTTP on its port: the operations routes, the
/// routes the service adds, and any background workers it runs beside the server.
public func buildHTTPService(
    settings: CommonSettings,
    logger: Logger,
    extraReadinessChecks: [ReadinessCheck] = [],
    routes: (Router<ClientRequestContext>, ServiceEnvironment) -> Void = { _, _ in },
    internalListener: InternalListener? = nil,
    workers: (ServiceEnvironment) -> [any Service] = { _ in [] },
    startupProblems: [String] = [],
    onServerRunning: (@Sendable (Int) async -> Void)? = nil
) -> HTTPServiceHandle {
    let environment = ServiceEnvironment(settings: settings, logger: logger)
    let draining = DrainFlag()
    let router = Router(context: ClientRequestContext.self)
    router.add(middleware: HTTPMetricsMiddleware(metrics: environment.metrics))
    router.add(middleware: RequestBodyLimit())
    OperationsRoutes(
        environment: environment,
        readiness: Readiness(checks: environment.standardReadinessChecks + extraReadinessChecks),
        draining: draining
    ).register(on: router)
    routes(router, environment)
    var internalApps: [any Service] = []
    if let internalListener {
        // A port of its own for what only other services call, so that the public port
        // (behind the load balancer) never exposes it.
        let internalRouter = Router(context: BasicRequestContext.self)
        internalRouter.add(middleware: HTTPMetricsMiddleware(metrics: environment.metrics))
        internalRouter.add(middleware: RequestBodyLimit())
        internalListener.routes(internalRouter, environment)
        internalApps.append(Application(
            router: internalRouter,
            configuration: .init(
                address: .hostname(internalListener.http.host, port: internalListener.http.port),
                serverName: "whisper-\(settings.service)-internal"
            ),
            onServerRunning: { channel in
                await internalListener.onServerRunning?(channel.localAddress?.port ?? 0)
            },
            logger: environment.logger
        ))
    }
    var app = Application(
        router: router,
        configuration: .init(
            address: .hostname(settings.http.host, port: settings.http.port),
            serverName: "whisper-\(settings.service)"
        ),
        onServerRunning: { channel in
            await onServerRunning?(channel.localAddress?.port ?? 0)
        },
        logger: environment.logger
    )
    app.addServices(DrainSignal(flag: draining))
    let refusals: [any Service] = startupProblems.isEmpty ? [] : [RefuseToStart(problems: startupProblems)]
    let assembly = ServiceAssembly(
        services: refusals + environment.clientServices + workers(environment) + internalApps + [app],
        logger: environment.logger,
        gracePeriod: settings.shutdownGracePeriod
    )
    return HTTPServiceHandle(assembly: assembly, environment: environment)
}

/// Marks the service as draining as soon as graceful shutdown begins, so `/ready`
/// answers 503 while in-flight work finishes.
public struct DrainSignal: Service {
    let flag: DrainFlag

    public init(flag: DrainFlag) {
        self.flag = flag
    }

    public func run() async throws {
        await withGracefulShutdownHandler {
            try? await gracefulShutdown()
        } onGracefulShutdown: {
            flag.startDraining()
        }
    }
}

/// A second listener of a service: its address and its routes.
public struct InternalListener: Sendable {
    public var http: HTTPSettings
    public var routes: @Sendable (Router<BasicRequestContext>, ServiceEnvironment) -> Void
    public var onServerRunning: (@Sendable (Int) async -> Void)?

    public init(
        http: HTTPSettings, onServerRunning: (@Sendable (Int) async -> Void)? = nil,
        routes: @escaping @Sendable (Router<BasicRequestContext>, ServiceEnvironment) -> Void
    ) {
        self.http = http
        self.routes = routes
        self.onServerRunning = onServerRunning
    }
}

/// Stops a service at start when its settings cannot work, whichever way they were
/// made (environment, files, or code): the group ends with this error before anything
/// listens.
public struct RefuseToStart: Service {
    public let problems: [String]

    public init(problems: [String]) {
        self.problems = problems
    }

    public func run() async throws {
        throw SettingsError(problems: problems)
    }
}

public struct SettingsError: Error, CustomStringConvertible {
    public let problems: [String]
    public var description: String { "refusing to start: " + problems.joined(separator: "; ") }
}
