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

extension StartedForATest {
    /// Runs `more`, which starts what goes with this; when it throws, stops this first,
    /// so that a helper starting several things leaves none running when one fails.
    func then<T>(_ more: (Self) async throws -> T) async throws -> T {
        do {
            return try await more(self)
        } catch {
            try? await stop()
            throw error
        }
    }
}

extension MessagingStack: StartedForATest {}

/// Several things started one after another and stopped together, the last first.
struct StartedTogether: StartedForATest {
    private(set) var members: [any StartedForATest] = []

    /// Starts what `start` adds; when it throws, stops what had started before.
    static func start(_ start: (inout StartedTogether) async throws -> Void) async throws -> StartedTogether {
        var started = StartedTogether()
        do {
            try await start(&started)
        } catch {
            try? await started.stop()
            throw error
        }
        return started
    }

    mutating func add<Member: StartedForATest>(_ member: Member) -> Member {
        members.append(member)
        return member
    }

    func stop() async throws {
        for member in members.reversed() { try await member.stop() }
    }
}
