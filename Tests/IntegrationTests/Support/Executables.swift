import Foundation
import Testing
import WhisperShared

/// The project's executables as operators start them, for tests that need real processes.
enum Executables {
    static let binPath = ProcessInfo.processInfo.environment["WHISPER_TEST_BIN_PATH"]
        ?? TestServers.repoRoot.appendingPathComponent(".build/debug").path

    /// Starts `executable` with its output in a pipe (read it, or the process blocks
    /// once the pipe is full) or, with `keepOutput: false`, thrown away.
    static func launch(
        _ executable: String, arguments: [String] = [], environment: [String: String], keepOutput: Bool = true
    ) throws -> (Process, Pipe) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "\(binPath)/\(executable)")
        process.arguments = arguments
        process.environment = environment.merging(["PATH": "/usr/bin:/bin"]) { current, _ in current }
        let output = Pipe()
        if keepOutput {
            process.standardOutput = output
            process.standardError = output
        } else {
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
        }
        try process.run()
        return (process, output)
    }

    /// Every JSON log line the process wrote (reads until the process closes its output).
    static func logLines(_ pipe: Pipe) -> [[String: Any]] {
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        return String(decoding: data, as: UTF8.self).split(separator: "\n").compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
        }
    }

    /// Settings every service needs, for a freshly made database.
    static func environment(_ database: PostgresSettings) -> [String: String] {
        [
            "WHISPER_POSTGRES_URL": "postgres://\(database.username)@\(database.host):\(database.port)/\(database.database)",
            "WHISPER_REDIS_URL": TestServers.redisURL,
            "WHISPER_INTERNAL_TOKEN": TestServers.internalToken,
            "GATEWAY_FLOOR_KEYS": Data(TestServers.floorKeySeed).base64EncodedString(),
            "GC_WORKER_KT_VRF_KEY": Data(TestServers.directoryVRFSeed).base64EncodedString(),
            "GC_WORKER_KT_SIGNING_KEYS": Data(TestServers.directorySigningSeed).base64EncodedString(),
            "GC_WORKER_JOURNAL_KEYS": Data(TestServers.journalSecret).base64EncodedString(),
        ]
    }

    /// Applies the schema with `admin migrate`.
    static func migrate(_ environment: [String: String]) throws {
        let (migrate, _) = try launch("admin", arguments: ["migrate"], environment: environment, keepOutput: false)
        migrate.waitUntilExit()
        guard migrate.terminationStatus == 0 else { throw TestSetupError("admin migrate failed") }
    }
}
