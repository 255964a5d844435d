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
    routes: (Router<BasicRequestContext>, ServiceEnvironment) -> Void = { _, _ in },
    workers: (ServiceEnvironment) -> [any Service] = { _ in [] },
    onServerRunning: (@Sendable (Int) async -> Void)? = nil
) -> HTTPServiceHandle {
    let environment = ServiceEnvironment(settings: settings, logger: logger)
    let draining = DrainFlag()
    let router = Router(context: BasicRequestContext.self)
    router.add(middleware: HTTPMetricsMiddleware(metrics: environment.metrics))
    OperationsRoutes(
        environment: environment,
        readiness: Readiness(checks: environment.standardReadinessChecks + extraReadinessChecks),
        draining: draining
    ).register(on: router)
    routes(router, environment)
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
    let assembly = ServiceAssembly(
        services: environment.clientServices + workers(environment) + [app],
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
