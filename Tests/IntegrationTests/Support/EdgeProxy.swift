import Foundation

/// The compose edge (`deploy/nginx/nginx.conf`) run by a real nginx on loopback, in front
/// of one gateway: the file as shipped, with only its addresses changed (the listen
/// port, the gateway's address instead of compose's service name, temporary paths).
final class EdgeProxy: @unchecked Sendable {
    static let binary = TestServers.environment["WHISPER_TEST_NGINX"] ?? "/usr/sbin/nginx"

    let port: Int
    let directory: URL
    private let process: Process

    init(gatewayPort: Int) throws {
        port = try TestServers.freePort()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("whisper-edge-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let shipped = try String(contentsOf: TestServers.repoRoot.appendingPathComponent("deploy/nginx/nginx.conf"), encoding: .utf8)
        let rendered = try Self.render(shipped, port: port, gatewayPort: gatewayPort, directory: directory.path)
        let config = directory.appendingPathComponent("nginx.conf")
        try rendered.write(to: config, atomically: true, encoding: .utf8)
        process = Process()
        process.executableURL = URL(fileURLWithPath: Self.binary)
        process.arguments = ["-c", config.path, "-p", directory.path, "-g", "daemon off;"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        for _ in 0..<100 {
            if RedisProcess.canConnect(port: port) { return }
            Thread.sleep(forTimeInterval: 0.05) // polling interval while it binds
        }
        throw TestSetupError("nginx did not start on port \(port)")
    }

    /// Replaces each deployment address; a line that is not found fails the test, so the
    /// render follows the shipped file rather than a copy of it.
    static func render(_ text: String, port: Int, gatewayPort: Int, directory: String) throws -> String {
        let replacements: [(String, String)] = [
            ("listen 8080;", "listen 127.0.0.1:\(port);"),
            ("set $upstream gateway:8080;", "set $upstream 127.0.0.1:\(gatewayPort);"),
            ("pid /tmp/nginx.pid;", "pid \(directory)/nginx.pid;"),
            ("resolver 127.0.0.11 valid=10s ipv6=off;", "resolver 127.0.0.1 valid=10s ipv6=off;"),
            ("worker_processes auto;", "worker_processes 1;"),
        ]
        var rendered = text
        for (from, to) in replacements {
            guard rendered.contains(from) else { throw TestSetupError("deploy/nginx/nginx.conf no longer has \(from)") }
            rendered = rendered.replacingOccurrences(of: from, with: to)
        }
        return rendered.replacingOccurrences(of: "/tmp/nginx-", with: "\(directory)/nginx-")
    }

    deinit {
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        try? FileManager.default.removeItem(at: directory)
    }
}
