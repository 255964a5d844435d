import Foundation

/// GC runs an operator asked for (`POST /admin/attachments/gc/run`): the admin service
/// queues a job ID on `gc:requests` and records it in `gc:run:{jobId}` (a hash: state
/// `queued` → `running` → `done` or `failed`, who asked, when, and the counts); the
/// first gc-worker to pop it runs it and writes the outcome there. Kept 7 days.
public enum GCRuns {
    public static let requestsKey = "gc:requests"
    public static func key(_ jobId: String) -> String { "gc:run:{\(jobId)}" }
    public static let ttl: Duration = .seconds(7 * 86_400)
    /// Requests waiting at most; past it the oldest are dropped (each asks for the same work).
    public static let maxWaiting = 100

    public static func queue(_ jobId: String, requestedBy actor: String, at milliseconds: Int64, on redis: RedisClient) async throws {
        let replies = try await redis.pipeline([
            RedisCommand("HSET", [key(jobId), "jobId", jobId, "state", "queued", "requestedBy", actor, "requestedAt", milliseconds]),
            RedisCommand("PEXPIRE", [key(jobId), Int(ttl.milliseconds)]),
            RedisCommand("RPUSH", [requestsKey, jobId]),
            RedisCommand("LTRIM", [requestsKey, -maxWaiting, -1]),
        ])
        if let failure = replies.first(where: { if case .error = $0 { true } else { false } }), case .error(let message) = failure {
            throw RedisError.server(message)
        }
    }

    /// The next requested run, if any.
    public static func next(on redis: RedisClient) async throws -> String? {
        try await redis.send("LPOP", requestsKey).string
    }

    public static func update(_ jobId: String, _ fields: [(String, any RedisArgument)], on redis: RedisClient) async throws {
        var arguments: [any RedisArgument] = [key(jobId)]
        for (name, value) in fields { arguments += [name, value] }
        _ = try await redis.pipeline([RedisCommand("HSET", arguments), RedisCommand("PEXPIRE", [key(jobId), Int(ttl.milliseconds)])])
    }

    /// The run as JSON-ready values (numbers as numbers), or nil.
    public static func read(_ jobId: String, on redis: RedisClient) async throws -> [String: Any]? {
        let fields = try await redis.send("HGETALL", key(jobId)).array ?? []
        guard !fields.isEmpty else { return nil }
        var run: [String: Any] = [:]
        var index = 0
        while index + 1 < fields.count {
            if let name = fields[index].string, let value = fields[index + 1].string {
                run[name] = Int64(value).map { $0 as Any } ?? value
            }
            index += 2
        }
        return run
    }
}
