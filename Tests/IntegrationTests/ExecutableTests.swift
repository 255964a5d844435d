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

    @Test func migrateRunsOnceAndTheServicesStopCleanlyOnSIGTERM() async throws {
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

        // Each long-running service stops on SIGTERM with status 0, and stopping is not
        // reported as a failure: no warning or error lines.
        for (service, portVariable) in [("gateway", "GATEWAY_HTTP_PORT"), ("router", "ROUTER_HTTP_PORT"), ("auth", "AUTH_HTTP_PORT")] {
            var serviceEnvironment = environment
            serviceEnvironment[portVariable] = "\(port)"
            serviceEnvironment["WHISPER_LOG_LEVEL"] = "info"
            let (process, output) = try launch(service, environment: serviceEnvironment)
            _ = try await HTTP.waitFor("http://127.0.0.1:\(port)/ready") { $0.status == 200 }
            // A moment of normal running (the router's first blocking read is out).
            try await Task.sleep(for: .milliseconds(300))
            kill(process.processIdentifier, SIGTERM)
            let deadline = ContinuousClock.now + .seconds(15)
            while process.isRunning, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(!process.isRunning, "\(service) did not stop within 15 s of SIGTERM")
            if process.isRunning { process.terminate() }
            process.waitUntilExit()
            #expect(process.terminationStatus == 0, "\(service)")
            let lines = logLines(output)
            let events = lines.compactMap { $0["event"] as? String }
            #expect(events.contains("service_starting"), "\(service)")
            #expect(events.contains("service_stopped"), "\(service)")
            let complaints = lines.filter { ["warning", "error", "critical"].contains($0["level"] as? String ?? "") }
            #expect(complaints.isEmpty, "\(service) logged while stopping: \(complaints.compactMap { $0["event"] as? String })")
        }
    }
}
