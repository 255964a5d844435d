import Foundation

/// A redis-server of a test's own, on a port of its own, so the test may kill and
/// restart it without disturbing other tests.
final class RedisProcess: @unchecked Sendable {
    let port: Int
    let directory: URL
    private var process: Process?

    /// With `tls` (a server certificate and key, PEM files), the server speaks TLS only.
    let tls: (certificate: String, key: String)?

    /// More `redis-server` arguments (`--replicaof host port`).
    let extraArguments: [String]

    init(tls: (certificate: String, key: String)? = nil, arguments: [String] = []) throws {
        self.tls = tls
        self.extraArguments = arguments
        port = try TestServers.freePort()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("whisper-redis-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    var url: String { "\(tls == nil ? "redis" : "rediss")://127.0.0.1:\(port)" }

    func start() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: TestServers.redisServerBinary)
        let ports = tls.map { ["--port", "0", "--tls-port", "\(port)", "--tls-cert-file", $0.certificate, "--tls-key-file", $0.key, "--tls-auth-clients", "no"] }
            ?? ["--port", "\(port)"]
        process.arguments = ["--bind", "127.0.0.1"] + ports + [
            "--dir", directory.path,
            // As durable as the services require by default (`RedisServerCheck`).
            "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no", "--logfile", directory.appendingPathComponent("redis.log").path,
        ] + extraArguments
        try process.run()
        self.process = process
        // Wait until it accepts connections.
        for _ in 0..<100 {
            if Self.canConnect(port: port) { return }
            Thread.sleep(forTimeInterval: 0.05) // polling interval
        }
        throw TestSetupError("redis-server did not start on port \(port)")
    }

    /// SIGKILL: no goodbye to clients, as in a crash.
    func kill() {
        guard let process else { return }
        Foundation.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        self.process = nil
    }

    deinit {
        kill()
        try? FileManager.default.removeItem(at: directory)
    }

    static func canConnect(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        return result == 0
    }
}
