import Foundation
import WhisperShared

/// moto's S3-compatible server (PyPI `moto[server]`) on loopback, with the test bucket.
final class MotoProcess: @unchecked Sendable {
    /// The Python that has `moto[server]` (`python3 -m pip install 'moto[server]'`).
    static let python = TestServers.environment["WHISPER_TEST_PYTHON"] ?? "python3"
    let port: Int
    private var process: Process?

    init() throws {
        port = try TestServers.freePort()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [Self.python, "-m", "moto.server", "-H", "127.0.0.1", "-p", "\(port)"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        self.process = process
        for _ in 0..<200 {
            if RedisProcess.canConnect(port: port) { return }
            Thread.sleep(forTimeInterval: 0.05) // polling interval while it starts
        }
        throw TestSetupError("moto_server did not start on port \(port)")
    }

    var settings: S3Settings { TestServers.s3Settings(port: port) }

    /// The store with its bucket made.
    func client() async throws -> S3Client {
        let client = S3Client(signer: settings.signer)
        try await client.ensureBucket()
        return client
    }

    /// Stops the server. A test stops it at the end of its scope (`defer`): a test whose
    /// last use of it is the client made at the start could otherwise lose it to ARC midway.
    func stop() {
        if let process {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        process = nil
    }

    deinit {
        stop()
    }
}
