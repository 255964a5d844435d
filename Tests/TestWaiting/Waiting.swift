/// What both test targets wait with: polling real state until a condition holds (never
/// a fixed sleep), and the error a test's set-up throws when something it needs did not
/// come about.

/// A test's set-up failed: what it waited for did not happen.
public struct TestSetupError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Polls `condition` every 20 ms until it holds, or fails after `timeout`.
public func waitUntil(timeout: Duration = .seconds(10), _ condition: () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(20))
    }
    throw TestSetupError("condition not met within \(timeout)")
}
