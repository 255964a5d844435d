import Foundation
import Testing
import WhisperShared

/// The real executables, as operators run them.
@Suite struct ExecutableTests {
    func launch(_ executable: String, arguments: [String] = [], environment: [String: String]) throws -> (Process, Pipe) {
        try Executables.launch(executable, arguments: arguments, environment: environment)
    }

    func logLines(_ pipe: Pipe) -> [[String: Any]] { Executables.logLines(pipe) }

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

    /// The secrets shipped as examples (deploy/compose.env.example) start nothing: each
    /// service refuses them by name without printing them, and a gateway needs a floor
    /// key of its own beside the internal token.
    @Test(arguments: ["gateway", "auth", "router", "push-sender", "attachment-signer", "turn-cred", "admin", "gc-worker"])
    func theRepositorysExampleSecretsStopTheStart(executable: String) async throws {
        let example = try String(contentsOf: TestServers.repoRoot.appendingPathComponent("deploy/compose.env.example"), encoding: .utf8)
        var shipped: [String: String] = [:]
        for line in example.split(separator: "\n") where !line.hasPrefix("#") {
            let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2 { shipped[parts[0]] = parts[1] }
        }
        let token = try #require(shipped["WHISPER_INTERNAL_TOKEN"]), password = try #require(shipped["POSTGRES_PASSWORD"])
        let (process, output) = try launch(executable, environment: [
            "WHISPER_LOG_LEVEL": "info",
            "WHISPER_POSTGRES_URL": "postgres://whisper:\(password)@127.0.0.1:1/whisper",
            "WHISPER_REDIS_URL": "redis://127.0.0.1:1",
            "WHISPER_INTERNAL_TOKEN": token,
        ])
        // A service that took the secrets would go on to wait for its stores: stop it.
        try? await waitUntil(timeout: .seconds(20)) { !process.isRunning }
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
        #expect(process.terminationStatus == 1, "\(executable) started on the example secrets")
        let failure = try #require(logLines(output).first { $0["event"] as? String == "configuration_invalid" })
        let error = failure["error"] as? String ?? ""
        #expect(error.contains("WHISPER_POSTGRES_URL holds an example value"))
        // Services that read no internal token (router, push-sender, gc-worker) do not name it.
        if ["gateway", "auth", "turn-cred"].contains(executable) {
            #expect(error.contains("WHISPER_INTERNAL_TOKEN holds an example value"))
        }
        if executable == "gateway" { #expect(error.contains("GATEWAY_FLOOR_KEYS")) }
        #expect(!error.contains(token) && !error.contains(password))
    }

    @Test func migrateRunsOnceAndTheServicesStopCleanlyOnSIGTERM() async throws {
        let database = try await TestDatabases.shared.make(migrated: false)
        defer { TestDatabases.shared.release(database) }
        let port = try TestServers.freePort()
        let environment = Executables.environment(database)
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
            // Every port and URL the service would take by default is the test's own, so
            // the test passes beside a running `scripts/up` (which holds the defaults).
            serviceEnvironment["AUTH_INTERNAL_HTTP_PORT"] = "\(try TestServers.freePort())"
            serviceEnvironment["GATEWAY_AUTH_URL"] = "http://127.0.0.1:\(try TestServers.freePort())"
            serviceEnvironment["WHISPER_LOG_LEVEL"] = "info"
            let (process, output) = try launch(service, environment: serviceEnvironment)
            _ = try await HTTP.waitFor("http://127.0.0.1:\(port)/ready") { $0.status == 200 }
            #if os(Linux)
            // Allocations go to jemalloc (Package.swift), unless built without it.
            let maps = (try? String(contentsOfFile: "/proc/\(process.processIdentifier)/maps", encoding: .utf8)) ?? ""
            let systemMalloc = ProcessInfo.processInfo.environment["WHISPER_SYSTEM_MALLOC"] == "1"
            #expect(maps.contains("libjemalloc") != systemMalloc, "\(service) allocates with jemalloc")
            #endif
            if service == "router" {
                // Normal running: the router's blocking read is out.
                try await TestServers.withRedis { redis in
                    try await waitUntil {
                        let clients = try await redis.send("CLIENT", "LIST").string ?? ""
                        return clients.split(separator: "\n").contains { $0.contains("name=whisper-router-reader") && $0.contains("cmd=xreadgroup") }
                    }
                }
            }
            kill(process.processIdentifier, SIGTERM)
            try? await waitUntil(timeout: .seconds(15)) { !process.isRunning }
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
