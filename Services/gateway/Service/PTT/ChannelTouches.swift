import Logging
import Synchronization
import WhisperShared

/// The identities that connected to this gateway since the last batch, each with when it
/// last connected: the push-to-talk channels each was a member of by then are marked
/// active together (`PTTDesk.touchChannels`), every
/// `ChannelTouches.interval`, so a connection costs a set insertion and no query or task
/// of its own. At most `maxWaiting` wait; past it a connection is not noted, which only
/// delays its channels' mark to a later connection (a channel lapses after days, and is
/// marked at most once an hour anyway). Touches waiting when the gateway stops are lost
/// the same way.
final class ChannelTouches: Sendable {
    static let interval: Duration = .seconds(5)
    static let maxWaiting = 100_000
    private let waiting = Mutex<[String: Int64]>([:])

    /// `whisperId` connected at `at` (Unix ms).
    func note(_ whisperId: String, at: Int64) {
        waiting.withLock { waiting in
            if waiting[whisperId] != nil || waiting.count < Self.maxWaiting { waiting[whisperId] = at }
        }
    }

    /// The identities noted since the last call, with when each last connected.
    func take() -> [(whisperId: String, at: Int64)] {
        waiting.withLock { waiting in
            defer { waiting.removeAll() }
            return waiting.map { ($0.key, $0.value) }
        }
    }

    /// Marks the noted members' channels every `interval`.
    static func periodic(desk: PTTChannelDesk, logger: Logger) -> Periodic {
        Periodic(every: interval, waitingFirst: true, failure: "ptt_touch_failed", logger: logger) {
            try await desk.touchChannels()
            return nil
        }
    }
}
