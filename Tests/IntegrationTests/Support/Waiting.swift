/// The only places tests wait on time: polling real state until a condition holds, and
/// bounding a wait for something that should arrive. Neither decides a test's outcome by
/// how long something took.

// `waitUntil` and `TestSetupError`, shared with the server-free tests.
@_exported import TestWaiting
import Testing
import WhisperClient
import WhisperShared

extension TestServers {
    /// Runs `body` with a Redis client of its own (on the tests' Redis unless told).
    static func withRedis<T: Sendable>(_ configuration: RedisConfiguration = TestServers.redis, _ body: (RedisClient) async throws -> T) async throws -> T {
        let client = RedisClient(configuration: configuration, logger: TestServers.logger)
        let task = Task { try await client.run() }
        defer { task.cancel() }
        try await waitUntil { client.isConnected }
        return try await body(client)
    }
}

/// Expects `body` to be refused by the server with `code`.
func expectRefused(_ code: ErrorCode, _ what: String = "", _ body: () async throws -> Void) async {
    do {
        try await body()
        Issue.record("\(what): expected \(code.rawValue), but it succeeded")
    } catch WhisperClientError.refused(let actual, _) {
        #expect(actual == code, "\(what)")
    } catch {
        Issue.record("\(what): expected \(code.rawValue), got \(error)")
    }
}


/// What `operation` returns, or a `TestSetupError` when it has not returned within
/// `timeout` (it is then cancelled).
func withTimeout<T: Sendable>(
    _ what: String, timeout: Duration = .seconds(10), _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            try await Task.sleep(for: timeout)
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else {
            throw TestSetupError("\(what): nothing within \(timeout)")
        }
        return value
    }
}
