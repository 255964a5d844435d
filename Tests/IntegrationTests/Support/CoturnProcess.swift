import Foundation
import Synchronization

/// A real coturn (`turnserver`, Debian package `coturn`) on loopback in the REST-API
/// mode turn-cred serves (`use-auth-secret`), with the shared secrets the test gives.
final class CoturnProcess: @unchecked Sendable {
    static let binary = TestServers.environment["WHISPER_TEST_TURNSERVER"] ?? "/usr/bin/turnserver"
    static let client = TestServers.environment["WHISPER_TEST_TURNUTILS_UCLIENT"] ?? "/usr/bin/turnutils_uclient"
    /// Each instance relays on ports of its own.
    private static let nextRange = Atomic<Int>(0)

    let port: Int
    let directory: URL
    private var process: Process?

    init(secrets: [String]) throws {
        port = try TestServers.freePort()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("whisper-coturn-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let range = Self.nextRange.add(1, ordering: .relaxed).newValue % 100
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.binary)
        process.arguments = [
            // The deployments' own settings (quotas, denied peer ranges); the test's peers
            // are on 127.0.0.1, as with scripts/up.
            "-c", TestServers.repoRoot.appendingPathComponent("deploy/coturn/turnserver.conf").path,
            "--listening-ip=127.0.0.1", "--relay-ip=127.0.0.1", "--listening-port=\(port)",
            "--min-port=\(40_000 + range * 100)", "--max-port=\(40_000 + range * 100 + 99)",
            "--realm=whisper.test", "--allow-loopback-peers", "--allowed-peer-ip=127.0.0.1",
            "--log-file=\(directory.appendingPathComponent("turn.log").path)", "--simple-log",
            "--pidfile=\(directory.appendingPathComponent("turn.pid").path)",
        ] + secrets.map { "--static-auth-secret=\($0)" }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        self.process = process
        for _ in 0..<100 {
            if RedisProcess.canConnect(port: port) { return }
            Thread.sleep(forTimeInterval: 0.05) // polling interval while it binds
        }
        throw TestSetupError("turnserver did not start on port \(port)")
    }

    /// Runs coturn's own client against this server with the given credentials: it
    /// allocates a relay for each of two clients that then send each other packets
    /// through their relays. True when that worked (exit status 0).
    func allocates(username: String, credential: String) throws -> Bool {
        let (status, text) = try runClient(["-y", "-n", "3", "-u", username, "-w", credential])
        return status == 0 && text.contains("Total lost packets 0")
    }

    /// Runs coturn's client with `clients` allocations that send to `peer` through the relay;
    /// its exit status and what it printed (coturn's refusals among it: `403 (Forbidden
    /// IP)` for a denied peer, `486 (Allocation Quota Reached)`).
    func relay(to peer: String, username: String, credential: String, clients: Int = 1) throws -> (status: Int32, output: String) {
        try runClient(["-n", "1", "-m", "\(clients)", "-e", peer, "-u", username, "-w", credential])
    }

    private func runClient(_ arguments: [String]) throws -> (status: Int32, output: String) {
        let client = Process()
        client.executableURL = URL(fileURLWithPath: Self.client)
        client.arguments = ["-p", "\(port)"] + arguments + ["127.0.0.1"]
        let output = Pipe()
        client.standardOutput = output
        client.standardError = output
        try client.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        client.waitUntilExit()
        return (client.terminationStatus, text)
    }

    deinit {
        if let process {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: directory)
    }
}
