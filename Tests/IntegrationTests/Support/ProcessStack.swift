import Foundation
import WhisperShared

/// The eight services as operators run them: the real executables, each its own
/// process with its output in a file, on their own Redis, moto S3 store and database,
/// on free loopback ports. For tests that need what only whole processes show (logs,
/// the command-line client).
final class ProcessStack: @unchecked Sendable {
    static let names = ["auth", "gateway", "router", "push-sender", "attachment-signer", "turn-cred", "admin", "gc-worker"]

    /// One service process and the file its output goes to.
    struct Running {
        let name: String
        let process: Process
        let log: URL
        let port: Int
        var baseURL: String { "http://127.0.0.1:\(port)" }
    }

    let directory: URL
    let adminToken = "stack-admin-" + RandomID.uuid()
    let turnSecret = "stack-turn-secret-" + RandomID.uuid()
    let s3Secret = "stack-s3-secret-" + RandomID.uuid()
    private(set) var services: [String: Running] = [:]
    private let redis: RedisProcess
    private let moto: MotoProcess

    /// Starts Redis, moto, a fresh database and the eight services, and waits until each
    /// answers `/ready`. `environment` adds to (or overrides) the services' settings.
    static func start(environment extra: [String: String] = [:]) async throws -> ProcessStack {
        let stack = try ProcessStack()
        do {
            try await stack.launch(extra)
        } catch {
            await stack.stop()
            throw error
        }
        return stack
    }

    private init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("whisper-stack-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        redis = try RedisProcess()
        try redis.start()
        moto = try MotoProcess()
    }

    private func launch(_ extra: [String: String]) async throws {
        _ = try await moto.client()
        let database = try await TestDatabases.shared.make()
        var environment = Executables.environment(database)
        environment["WHISPER_REDIS_URL"] = redis.url
        let location = moto.settings.location
        environment["WHISPER_S3_ENDPOINT"] = location.endpoint
        environment["WHISPER_S3_BUCKET"] = location.bucket
        environment["WHISPER_S3_REGION"] = location.region
        environment["WHISPER_S3_PATH_STYLE"] = "true"
        environment["WHISPER_S3_ACCESS_KEY_ID"] = "stack-test"
        environment["WHISPER_S3_SECRET_ACCESS_KEY"] = s3Secret
        environment["ADMIN_TOKENS"] = "ops:\(adminToken)"
        environment["TURN_CRED_SECRETS"] = turnSecret
        environment["TURN_CRED_URLS"] = "turn:127.0.0.1:3478?transport=udp"
        let internalPorts = (auth: try TestServers.freePort(), turn: try TestServers.freePort())
        environment["AUTH_INTERNAL_HTTP_PORT"] = "\(internalPorts.auth)"
        environment["TURN_CRED_INTERNAL_HTTP_PORT"] = "\(internalPorts.turn)"
        environment["GATEWAY_AUTH_URL"] = "http://127.0.0.1:\(internalPorts.auth)"
        environment["GATEWAY_TURN_CRED_URL"] = "http://127.0.0.1:\(internalPorts.turn)"
        for name in Self.names {
            environment["\(Self.prefix(name))_HTTP_PORT"] = "\(try TestServers.freePort())"
        }
        environment.merge(extra) { _, new in new }
        for name in Self.names { services[name] = try Self.launch(name, environment: environment, in: directory) }
        for service in services.values {
            _ = try await HTTP.waitFor("\(service.baseURL)/ready") { $0.status == 200 }
        }
    }

    private static func prefix(_ name: String) -> String { name.uppercased().replacingOccurrences(of: "-", with: "_") }

    /// Starts one service executable with its output in `<directory>/<name>.log`.
    static func launch(_ name: String, environment: [String: String], in directory: URL) throws -> Running {
        let log = directory.appendingPathComponent("\(name).log")
        FileManager.default.createFile(atPath: log.path, contents: nil)
        let handle = try FileHandle(forWritingTo: log)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "\(Executables.binPath)/\(name)")
        process.environment = environment.merging(["PATH": "/usr/bin:/bin"]) { current, _ in current }
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        return Running(name: name, process: process, log: log, port: Int(environment["\(prefix(name))_HTTP_PORT"] ?? "") ?? 0)
    }

    /// The stack's own Redis.
    var redisConfiguration: RedisConfiguration? { RedisConfiguration(url: redis.url) }

    func service(_ name: String) throws -> Running {
        guard let service = services[name] else { throw TestSetupError("no service \(name)") }
        return service
    }

    /// Stops the services (SIGTERM, so they flush their logs; killed if they linger),
    /// then Redis and moto. The logs stay until `removeFiles`.
    func stop() async {
        for service in services.values where service.process.isRunning {
            kill(service.process.processIdentifier, SIGTERM)
        }
        for service in services.values {
            try? await waitUntil(timeout: .seconds(15)) { !service.process.isRunning }
            if service.process.isRunning { service.process.terminate() }
        }
        redis.kill()
        // moto stops with this object (MotoProcess's deinit).
    }

    /// Kills whatever still runs (for a `defer` after a failure) and removes the logs.
    func discard() {
        for service in services.values where service.process.isRunning {
            kill(service.process.processIdentifier, SIGKILL)
        }
        redis.kill()
        removeFiles()
    }

    func removeFiles() {
        try? FileManager.default.removeItem(at: directory)
    }
}
