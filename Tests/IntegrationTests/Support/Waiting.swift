/// The only places tests wait on time: polling real state until a condition holds, and
/// bounding a wait for something that should arrive. Neither decides a test's outcome by
/// how long something took.

// `waitUntil` and `TestSetupError`, shared with the server-free tests.
@_exported import TestWaiting
import Synchronization
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


/// What `operation` returns, or a `TestSetupError` once it has not returned within
/// `timeout`. The operation is then cancelled but not waited for: an await that ignores
/// cancellation (a future nothing completes) must fail the test, not hang the run.
func withTimeout<T: Sendable>(
    _ what: String, timeout: Duration = .seconds(10), _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    let outcome = FirstOutcome<T>()
    return try await withCheckedThrowingContinuation { continuation in
        outcome.waiting(continuation)
        let work = Task {
            do { outcome.finish(.success(try await operation())) } catch { outcome.finish(.failure(error)) }
        }
        outcome.timer(Task {
            guard (try? await Task.sleep(for: timeout)) != nil else { return }
            work.cancel()
            outcome.finish(.failure(TestSetupError("\(what): nothing within \(timeout)")))
        })
    }
}

/// The continuation of ``withTimeout(_:timeout:_:)``, resumed by whichever comes first.
private final class FirstOutcome<T: Sendable>: Sendable {
    private let state = Mutex<(continuation: CheckedContinuation<T, any Error>?, timer: Task<Void, Never>?)>((nil, nil))

    func waiting(_ continuation: CheckedContinuation<T, any Error>) { state.withLock { $0.continuation = continuation } }
    /// The timer of an operation already finished is stopped at once.
    func timer(_ task: Task<Void, Never>) {
        state.withLock { state in
            if state.continuation == nil { task.cancel() } else { state.timer = task }
        }
    }

    func finish(_ result: Result<T, any Error>) {
        state.withLock { state in
            state.continuation?.resume(with: result)
            state.continuation = nil
            state.timer?.cancel()
        }
    }
}
