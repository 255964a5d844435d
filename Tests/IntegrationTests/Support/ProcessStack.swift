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
    /// Each service's settings and binary, kept to start it again as it was.
    private var launched: [String: (binary: String, environment: [String: String])] = [:]
    private let redis: RedisProcess
    private let moto: MotoProcess
    /// The database `launch` made, released when the stack stops.
    private(set) var database: PostgresSettings?

    /// Starts Redis, moto, a fresh database and the eight services, and waits until each
    /// answers `/ready`. `environment` adds to (or overrides) the services' settings.
    /// `gateways`: more than one runs `gateway`, `gateway-2`, … on ports of their own.
    static func start(environment extra: [String: String] = [:], gateways: Int = 1) async throws -> ProcessStack {
        let stack = try ProcessStack()
        do {
            try await stack.launch(extra, gateways: gateways)
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

    private func launch(_ extra: [String: String], gateways: Int) async throws {
        _ = try await moto.client()
        let database = try await TestDatabases.shared.make()
        self.database = database
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
        for name in Self.names { launched[name] = (name, environment) }
        for index in stride(from: 2, through: gateways, by: 1) {
            launched["gateway-\(index)"] = ("gateway", environment.merging(["GATEWAY_HTTP_PORT": "\(try TestServers.freePort())"]) { _, new in new })
        }
        for (name, how) in launched { services[name] = try Self.launch(name, binary: how.binary, environment: how.environment, in: directory) }
        for service in services.values {
            _ = try await HTTP.waitFor("\(service.baseURL)/ready") { $0.status == 200 }
        }
    }

    /// The gateways' names: `gateway`, then `gateway-2`, ….
    var gateways: [String] { services.keys.filter { $0.hasPrefix("gateway") }.sorted { ($0.count, $0) < ($1.count, $1) } }

    /// Stops one service with `signal` (SIGTERM: it drains; SIGKILL: it dies at once),
    /// waits for it to exit, and starts it again on the same port with the same settings.
    func restart(_ name: String, signal: Int32) async throws {
        let old = try service(name)
        guard let how = launched[name] else { throw TestSetupError("no service \(name)") }
        kill(old.process.processIdentifier, signal)
        try await waitUntil(timeout: .seconds(30)) { !old.process.isRunning }
        let again = try Self.launch(name, binary: how.binary, environment: how.environment, in: directory)
        services[name] = again
        _ = try await HTTP.waitFor("\(again.baseURL)/ready", timeout: .seconds(30)) { $0.status == 200 }
    }

    /// The last `lines` lines each service wrote, for a failure's message.
    func logTails(lines: Int = 15) -> String {
        services.keys.sorted().map { name in
            let text = (try? String(contentsOf: services[name]!.log, encoding: .utf8)) ?? ""
            return "--- \(name)\n" + text.split(separator: "\n").suffix(lines).joined(separator: "\n")
        }.joined(separator: "\n")
    }

    /// Redis dies (SIGKILL) and starts again on its port from its append-only file.
    func restartRedis() throws {
        redis.kill()
        try redis.start()
    }

    private static func prefix(_ name: String) -> String { name.uppercased().replacingOccurrences(of: "-", with: "_") }

    /// Starts one service executable (`binary`, the service's name unless given) with its
    /// output appended to `<directory>/<name>.log`.
    static func launch(_ name: String, binary: String? = nil, environment: [String: String], in directory: URL) throws -> Running {
        let log = directory.appendingPathComponent("\(name).log")
        if !FileManager.default.fileExists(atPath: log.path) { FileManager.default.createFile(atPath: log.path, contents: nil) }
        let handle = try FileHandle(forWritingTo: log)
        handle.seekToEndOfFile()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "\(Executables.binPath)/\(binary ?? name)")
        process.environment = environment.merging(["PATH": "/usr/bin:/bin"]) { current, _ in current }
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        return Running(name: name, process: process, log: log, port: Int(environment["\(prefix(binary ?? name))_HTTP_PORT"] ?? "") ?? 0)
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
        moto.stop()
        releaseDatabase()
    }

    /// Kills whatever still runs (for a `defer` after a failure) and removes the logs.
    func discard() {
        for service in services.values where service.process.isRunning {
            kill(service.process.processIdentifier, SIGKILL)
        }
        redis.kill()
        moto.stop()
        releaseDatabase()
        removeFiles()
    }

    private func releaseDatabase() {
        if let database { TestDatabases.shared.release(database) }
        database = nil
    }

    func removeFiles() {
        try? FileManager.default.removeItem(at: directory)
    }
}
