/// The outcome of one readiness check.
public enum CheckResult: Sendable, Equatable {
    case ok
    case failed(String)

    public var isOK: Bool { self == .ok }
}

/// One thing `/ready` looks at. A check that throws or takes longer than the timeout fails.
public struct ReadinessCheck: Sendable {
    public var name: String
    public var run: @Sendable () async throws -> CheckResult

    public init(name: String, run: @escaping @Sendable () async throws -> CheckResult) {
        self.name = name
        self.run = run
    }
}

/// Runs every check at once, each bounded by `timeout`.
public struct Readiness: Sendable {
    public var checks: [ReadinessCheck]
    public var timeout: Duration

    public init(checks: [ReadinessCheck], timeout: Duration = .seconds(2)) {
        self.checks = checks
        self.timeout = timeout
    }

    public func evaluate() async -> [(name: String, result: CheckResult)] {
        await withTaskGroup(of: (Int, CheckResult).self) { group in
            for (index, check) in checks.enumerated() {
                group.addTask {
                    (index, await Self.run(check, timeout: timeout))
                }
            }
            var results = [CheckResult](repeating: .failed("not run"), count: checks.count)
            for await (index, result) in group {
                results[index] = result
            }
            return zip(checks, results).map { ($0.name, $1) }
        }
    }

    static func run(_ check: ReadinessCheck, timeout: Duration) async -> CheckResult {
        await withTaskGroup(of: CheckResult?.self) { group in
            group.addTask {
                do {
                    return try await check.run()
                } catch {
                    return .failed(String(describing: error))
                }
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return Task.isCancelled ? nil : .failed("timed out after \(Int(timeout.milliseconds)) ms")
            }
            let first = await group.next() ?? .failed("not run")
            group.cancelAll()
            return first ?? .failed("cancelled")
        }
    }
}
