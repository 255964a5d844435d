import Foundation
import Logging
import Synchronization
import PostgresNIO
import Prometheus
import ServiceLifecycle
import WhisperMessaging
import WhisperShared

/// Push-to-talk channels that lapsed: none of their members connected for `idleDays`
/// (the gateway marks a member's channels when it connects). Deleted with their members;
/// their Redis keys (floor, queue, announcement) lapse by themselves.
public struct IdleChannels: Sendable {
    let postgres: PostgresClient
    let idleDays: Int
    let logger: Logger

    public init(postgres: PostgresClient, idleDays: Int, logger: Logger) {
        self.postgres = postgres
        self.idleDays = idleDays
        self.logger = logger
    }

    /// Deletes up to 1,000 lapsed channels; returns how many.
    public func lapse() async throws -> Int {
        let rows = try await postgres.query(
            """
            DELETE FROM ptt_channels WHERE channel_id IN (
                SELECT channel_id FROM ptt_channels WHERE last_active_at < now() - make_interval(days => \(Int32(clamping: idleDays))) LIMIT 1000
            ) RETURNING channel_id
            """,
            logger: logger
        )
        var count = 0
        for try await _ in rows.decode(String.self) { count += 1 }
        return count
    }
}

/// Runs `IdleChannels` every `interval` (several gc-workers may: a deletion is once).
enum IdleChannelsLoop {
    static func periodic(channels: IdleChannels, interval: Duration, logger: Logger) -> Periodic {
        Periodic(every: interval, failure: "ptt_lapse_failed", logger: logger) {
            let lapsed = try await channels.lapse()
            if lapsed > 0 { logger.info("ptt_channels_lapsed", metadata: ["count": "\(lapsed)"]) }
            return nil
        }
    }
}
