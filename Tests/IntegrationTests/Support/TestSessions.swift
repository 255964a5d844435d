import Synchronization
import Testing
import WhisperClient

/// The SDK sessions a test started, stopped when the test ends, whether it passed or
/// failed: a session left running keeps reconnecting to ports a later test's servers
/// may bind, and took a socket of theirs. A suite marked `.stopsSessions` gives each test
/// its own list; the suite's helpers `track` each session they make.
final class TestSessions: Sendable {
    @TaskLocal static var current: TestSessions?

    private let sessions = Mutex<[WhisperSession]>([])

    /// Adds `session` to the running test's list (none outside a `.stopsSessions` suite).
    @discardableResult
    static func track(_ session: WhisperSession) -> WhisperSession {
        current?.sessions.withLock { $0.append(session) }
        return session
    }

    fileprivate func stopAll() async {
        for session in sessions.withLock({ $0 }) {
            await session.stop()
        }
    }
}

/// Each test of the suite runs with a `TestSessions` list, stopped once it ends.
struct StopsSessions: SuiteTrait, TestTrait, TestScoping {
    var isRecursive: Bool { true }

    func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        guard testCase != nil else {
            try await function()
            return
        }
        let sessions = TestSessions()
        do {
            try await TestSessions.$current.withValue(sessions) { try await function() }
        } catch {
            await sessions.stopAll()
            throw error
        }
        await sessions.stopAll()
    }
}

extension Trait where Self == StopsSessions {
    /// Stops every session a test `track`ed when the test ends.
    static var stopsSessions: Self { StopsSessions() }
}
