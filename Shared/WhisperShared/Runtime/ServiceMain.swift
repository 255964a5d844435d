import Foundation
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle

/// The settings of one executable: the common part and its own.
public protocol ServiceSettings: Sendable {
    /// The executable's name, e.g. `gateway`.
    static var serviceName: String { get }
    /// The port it listens on unless `<SERVICE>_HTTP_PORT` says otherwise.
    static var defaultPort: Int { get }
    var common: CommonSettings { get }
    init(from settings: SettingsReader)
}

/// A service instance ready to run: its long-running parts in start order (clients
/// first) and what to do when shutdown begins.
public struct ServiceAssembly: Sendable {
    public var services: [any Service]
    public var logger: Logger
    public var gracePeriod: Duration

    public init(services: [any Service], logger: Logger, gracePeriod: Duration) {
        self.services = services
        self.logger = logger
        self.gracePeriod = gracePeriod
    }

    /// A group that stops gracefully on SIGTERM/SIGINT when `handleSignals` is set
    /// (production), or only when told to (tests).
    public func makeGroup(handleSignals: Bool) -> ServiceGroup {
        var configuration = ServiceGroupConfiguration(
            services: services.map { .init(service: $0) },
            gracefulShutdownSignals: handleSignals ? [.sigterm, .sigint] : [],
            cancellationSignals: handleSignals ? [.sigquit] : [],
            logger: logger
        )
        configuration.maximumGracefulShutdownDuration = gracePeriod
        return ServiceGroup(configuration: configuration)
    }
}

public enum ServiceMain {
    /// Runs Swift Concurrency's tasks on SwiftNIO's event loop threads instead of a
    /// separate pool, so that awaiting a Redis, Postgres or socket operation does not
    /// hop between threads (and wake one) twice per call. Call first thing in `main`,
    /// before any task starts; the services never block inside a task.
    public static func useEventLoopsForConcurrency() {
        NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
    }

    /// Reads the settings from the environment, sets up JSON logging, and runs the
    /// service until it is told to stop. Exits with status 1 when settings are missing
    /// or invalid, naming each one.
    public static func run<Settings: ServiceSettings>(
        _ type: Settings.Type,
        build: (Settings, Logger) async throws -> ServiceAssembly
    ) async -> Never {
        let reader = SettingsReader.environment()
        let settings = Settings(from: reader)
        let service = Settings.serviceName
        let level = settings.common.logLevel
        LoggingSystem.bootstrap { label in
            JSONLogHandler(label: label, service: service, level: level)
        }
        let logger = Logger(label: service)
        do {
            try reader.validate()
        } catch {
            logger.critical("configuration_invalid", metadata: ["error": "\(error)"])
            exit(1)
        }
        for (older, current) in reader.olderNamesUsed {
            logger.warning("setting_renamed", metadata: ["variable": "\(older)", "use": "\(current)"])
        }
        // Whatever happens to the graceful shutdown, the process is gone soon after.
        let watchdog = ShutdownWatchdog(grace: settings.common.shutdownGracePeriod, logger: logger)
        do {
            var assembly = try await build(settings, logger)
            // Traces, when a collector is configured: its exporter starts first and
            // stops last, so the spans of the shutdown itself still leave.
            if let exporter = try WhisperTracing.bootstrap(service: service, logger: logger) {
                assembly.services.insert(exporter, at: 0)
            }
            logger.info("service_starting", metadata: [
                "host": "\(settings.common.http.host)", "port": "\(settings.common.http.port)",
            ])
            try await assembly.makeGroup(handleSignals: true).run()
            logger.info("service_stopped")
            withExtendedLifetime(watchdog) { exit(0) }
        } catch {
            logger.critical("service_failed", metadata: ["error": "\(error)"])
            exit(1)
        }
    }
}

/// Names a service that needs no settings beyond the common ones.
public protocol ServiceIdentity: Sendable {
    static var serviceName: String { get }
    static var defaultPort: Int { get }
}

/// Settings of a service that reads only the common settings.
public struct CommonServiceSettings<Identity: ServiceIdentity>: ServiceSettings {
    public static var serviceName: String { Identity.serviceName }
    public static var defaultPort: Int { Identity.defaultPort }
    public var common: CommonSettings

    public init(common: CommonSettings) {
        self.common = common
    }

    public init(from settings: SettingsReader) {
        common = CommonSettings(service: Self.serviceName, defaultPort: Self.defaultPort, from: settings)
    }
}
