import Logging
import PostgresNIO

extension PostgresConnection {
    /// The number a `SELECT count(*)::bigint …` query answers (0 when it answers no row),
    /// for bounds checked inside a transaction.
    public func count(_ query: PostgresQuery, logger: Logger) async throws -> Int {
        var count: Int64 = 0
        for try await row in try await self.query(query, logger: logger).decode(Int64.self) { count = row }
        return Int(count)
    }
}
