import Foundation
import Testing
import WhisperShared

/// The real executables, as operators run them.
@Suite struct ExecutableTests {
    static let binPath = ProcessInfo.processInfo.environment["WHISPER_TEST_BIN_PATH"]
        ?? TestServers.repoRoot.appendingPathComponent(".build/debug").path

    func launch(_ executable: String, arguments: [String] = [], environment: [String: String]) throws -> (Process, Pipe) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "\(Self.binPath)/\(executable)")
        process.arguments = arguments
        process.environment = environment.merging(["PATH": "/usr/bin:/bin"]) { current, _ in current }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        return (process, output)
    }

    func logLines(_ pipe: Pipe) -> [[String: Any]] {
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        return String(decoding: data, as: UTF8.self).split(separator: "\n").compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
        }
    }

    @Test(arguments: ["gateway", "auth", "router", "push-sender", "attachment-signer", "turn-cred", "admin", "gc-worker"])
    func missingSettingsStopTheStartNamingEachOne(executable: String) throws {
        let (process, output) = try launch(executable, environment: ["WHISPER_LOG_LEVEL": "info"])
        process.waitUntilExit()
        #expect(process.terminationStatus == 1)
        let lines = logLines(output)
        let failure = try #require(lines.first { $0["event"] as? String == "configuration_invalid" })
        let error = failure["error"] as? String ?? ""
        #expect(error.contains("WHISPER_POSTGRES_URL"))
        #expect(error.contains("WHISPER_REDIS_URL"))
        #expect(failure["service"] as? String == executable)
        #expect(failure["level"] as? String == "critical")
    }

    @Test func migrateRunsOnceAndTheGatewayStopsCleanlyOnSIGTERM() async throws {
        let database = try await TestDatabases.shared.make(migrated: false)
        let port = try TestServers.freePort()
        var environment = [
            "WHISPER_POSTGRES_URL": "postgres://\(database.username)@\(database.host):\(database.port)/\(database.database)",
            "WHISPER_REDIS_URL": TestServers.redisURL,
            "WHISPER_INTERNAL_TOKEN": TestServers.internalToken,
        ]
        for _ in 0..<2 {
            let (migrate, migrateOutput) = try launch("admin", arguments: ["migrate"], environment: environment)
            migrate.waitUntilExit()
            #expect(migrate.terminationStatus == 0)
            #expect(logLines(migrateOutput).contains { $0["event"] as? String == "migrate_done" })
        }

        environment["GATEWAY_HTTP_PORT"] = "\(port)"
        let (gateway, output) = try launch("gateway", environment: environment)
        _ = try await HTTP.waitFor("http://127.0.0.1:\(port)/ready") { $0.status == 200 }
        kill(gateway.processIdentifier, SIGTERM)
        let deadline = ContinuousClock.now + .seconds(15)
        while gateway.isRunning, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(!gateway.isRunning, "gateway did not stop within 15 s of SIGTERM")
        if gateway.isRunning { gateway.terminate() }
        gateway.waitUntilExit()
        #expect(gateway.terminationStatus == 0)
        let events = logLines(output).compactMap { $0["event"] as? String }
        #expect(events.contains("service_starting"))
        #expect(events.contains("service_stopped"))
    }
}
