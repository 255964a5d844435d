/// Something a test starts (a stack of services, one service, a server of its own) and
/// must stop whatever happens: `running` hands it to the test's body and stops it after,
/// also when the body throws or an expectation inside it fails, so no test leaves
/// processes or services behind for the tests after it.
protocol StartedForATest {
    func stop() async throws
}

extension StartedForATest {
    /// Runs `body` with this, then stops it, also when `body` throws.
    func running<T>(_ body: (Self) async throws -> T) async throws -> T {
        let result: T
        do {
            result = try await body(self)
        } catch {
            try? await stop()
            throw error
        }
        try await stop()
        return result
    }
}

extension MessagingStack: StartedForATest {}
