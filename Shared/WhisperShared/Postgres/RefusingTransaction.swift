import Logging
import PostgresNIO

extension PostgresClient {
    /// `withTransaction`, with a refusal of type `Refusal` that `body` throws (decided
    /// inside the transaction, which then rolled back: nothing changed) coming out as
    /// itself rather than wrapped in `PostgresTransactionError`, so that it is answered
    /// as the refusal it is. Anything else, or a refusal whose rollback failed, comes out
    /// as PostgresNIO throws it.
    public func withTransaction<T: Sendable, Refusal: Error>(
        refusing _: Refusal.Type, logger: Logger, _ body: (PostgresConnection) async throws -> sending T
    ) async throws -> T {
        do {
            return try await withTransaction(logger: logger, body)
        } catch let failure as PostgresTransactionError {
            if let refusal = failure.closureError as? Refusal, failure.rollbackError == nil { throw refusal }
            throw failure
        }
    }
}
