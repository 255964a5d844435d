import Logging
import Synchronization
import WhisperShared

/// The identities that connected since the last batch, whose push-to-talk channels are
/// marked active together every `interval`: a connection costs a set insertion. Past
/// `maxWaiting` one is not noted, which only delays the mark (channels lapse after days).
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
